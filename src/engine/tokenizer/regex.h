// Regular expressions for tokenizer.json patterns (Split, Replace, the GPT-2 ByteLevel split).
// Hugging Face compiles them with Oniguruma; we use PCRE2 (UTF + UCP), which reads the same
// syntax, after rewriting the class escapes whose Unicode meaning differs (`\s`, `\w` and their
// negations) into explicit property classes with Oniguruma's meaning.
//
// Thread safety: a compiled Regex is immutable; FindAll may run on many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::engine {

class Regex {
 public:
  struct Match {
    size_t begin;
    size_t end;
  };

  // Errors carry PCRE2's message and the offset of the offending character in the pattern.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // A pattern that matches `literal` exactly.
  static absl::StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);

  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches, left to right, with Oniguruma's rule for empty matches (an empty
  // match right where the previous match ended is skipped). `text` must be valid UTF-8. If the
  // engine gives up (match limit on a pathological pattern), the matches found so far are kept.
  std::vector<Match> FindAll(std::string_view text) const;

 private:
  explicit Regex(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*, opaque here so the header does not pull in pcre2.h.
};

// Oniguruma -> PCRE2 rewrite of `\s \S \w \W`, exposed for tests.
std::string TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace exa::engine
