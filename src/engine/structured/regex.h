// Regular expressions for structured outputs (docs/architecture.md#structured-outputs): a pattern
// in ECMA-262's syntax (JSON Schema's `pattern`, vLLM's `guided_regex`) compiled into a
// deterministic automaton over the UTF-8 bytes of the text it matches whole.
//
// Syntax: literals; `.` (any character but \n, \r, U+2028, U+2029); classes `[a-z]`, `[^...]`;
// escapes \d \D \w \W \s \S \t \n \r \f \v \0 \cX \xHH \uHHHH (surrogate pairs joined) and escaped
// punctuation; groups `(...)`, `(?:...)`, `(?<name>...)`; alternation `|`; quantifiers `*` `+`
// `?` `{n}` `{n,}` `{n,m}` (m at most kMaxRegexRepeat), lazy or not (the same language); `^` at
// the start and `$` at the end of a top-level alternative. Backreferences, lookaround, word
// boundaries and \p{...} classes are refused by name (INVALID_ARGUMENT), never dropped.
//
// The text must match the whole pattern, as xgrammar and Outlines generate it; such text also
// satisfies JSON Schema's `pattern`, which only asks that the pattern match somewhere in it.
//
// Every state of a compiled automaton can still reach acceptance: a matcher that follows only
// its transitions never writes a prefix it cannot finish. Character counts (JSON Schema's
// minLength / maxLength) are folded into the states, so the bounds hold with the same
// guarantee.
//
// Thread safety: a ByteDfa is immutable once compiled.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::engine::structured {

// Bounds (docs/architecture.md#module-map, rule 5): a pattern beyond them is refused.
inline constexpr size_t kMaxPatternBytes = 4096;
inline constexpr int64_t kMaxRegexRepeat = 1000;
inline constexpr int32_t kMaxRegexNfaStates = 65536;
inline constexpr int32_t kMaxRegexDfaStates = 16384;

struct RegexOptions {
  // The text is a JSON string's value written by JsonMatcher: a control character other than
  // \b \t \n \f \r has no escape it writes, so paths through one are dropped.
  bool json_string = false;
  // The text's length in characters (code points).
  int64_t min_length = 0;
  int64_t max_length = std::numeric_limits<int64_t>::max();
};

class ByteDfa {
 public:
  static constexpr int32_t kDead = -1;

  int32_t start() const { return start_; }
  int32_t states() const { return static_cast<int32_t>(accepting_.size()); }
  // The state after `byte`, or kDead.
  int32_t Next(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * classes_ + class_of_[byte]];
  }
  // The text so far matches whole.
  bool Accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // Some byte continues the text.
  bool HasNext(int32_t state) const { return has_next_[static_cast<size_t>(state)] != 0; }
  // Every plain character (token_trie.h: a whole UTF-8 character other than a quote, backslash,
  // DEL or control character) leads back to `state`, as inside ".*": a vocabulary walk may take
  // plain tokens whole. Computed for RegexOptions::json_string only; false otherwise.
  bool LoopsOnPlainText(int32_t state) const {
    return !plain_loop_.empty() && plain_loop_[static_cast<size_t>(state)] != 0;
  }

 private:
  friend class DfaBuilder;

  std::array<uint8_t, 256> class_of_{};  // bytes no transition tells apart share a class
  size_t classes_ = 1;
  std::vector<int32_t> next_;  // states × classes
  std::vector<uint8_t> accepting_;
  std::vector<uint8_t> has_next_;
  std::vector<uint8_t> plain_loop_;
  int32_t start_ = 0;
};

// Compiles `pattern`. INVALID_ARGUMENT names what is wrong or unsupported, and is returned too
// when no text within `options` matches, or the automaton would pass the bounds above.
absl::StatusOr<ByteDfa> CompileRegex(std::string_view pattern, const RegexOptions& options = {});

}  // namespace exa::engine::structured
