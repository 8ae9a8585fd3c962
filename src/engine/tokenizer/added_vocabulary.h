// Added tokens ("added_tokens" in tokenizer.json): strings such as <|im_start|> or <s> that are
// cut out of the text before normalization and pre-tokenization and map straight to one id.
// Matching follows Hugging Face's AddedVocabulary: leftmost-longest, then the single_word,
// lstrip and rstrip rules; tokens with normalized=false are matched on the raw text, those with
// normalized=true on the normalized text (against their normalized form).
//
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace exa::engine {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A byte range of the text; `id` is the matched token, or -1 for text between tokens.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

// A byte trie over the token strings of one matching set.
class TokenTrie {
 public:
  void Add(std::string_view text, int32_t token_index);
  bool empty() const { return terminal_.size() <= 1; }
  // Length and token of the longest token that starts at text[pos], or {0, -1}.
  std::pair<size_t, int32_t> LongestAt(std::string_view text, size_t pos) const;

 private:
  static uint64_t EdgeKey(int32_t node, uint8_t byte) {
    return (static_cast<uint64_t>(node) << 8) | byte;
  }
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_ = {-1};  // Per node: token index ending here, or -1.
  bool first_byte_[256] = {};
};

class AddedVocabulary {
 public:
  // `normalized_forms[i]` is tokens[i].content after the tokenizer's normalizer (only read for
  // tokens with normalized=true).
  AddedVocabulary(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_forms);

  // Segments covering `text` with the non-normalized tokens cut out.
  std::vector<Segment> SplitRaw(std::string_view text) const { return Split(text, raw_); }
  // Segments covering already-normalized `text` with the normalized tokens cut out.
  std::vector<Segment> SplitNormalized(std::string_view text) const {
    return Split(text, normalized_);
  }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<Segment> Split(std::string_view text, const TokenTrie& trie) const;

  std::vector<AddedToken> tokens_;
  TokenTrie raw_;
  TokenTrie normalized_;
};

}  // namespace exa::engine
