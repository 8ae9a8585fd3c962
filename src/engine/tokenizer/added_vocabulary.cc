#include "engine/tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

// Rust regex's Unicode `\w`, which single_word tests on the characters around a match.
bool IsWordChar(char32_t c) {
  switch (utf8proc_category(static_cast<int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return c == 0x200C || c == 0x200D;  // Join_Control
  }
}

// The character that ends at byte `end` of valid UTF-8 `text` (end > 0).
char32_t CharBefore(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  return utf8::DecodeAt(text, begin, end - begin);
}

char32_t CharAt(std::string_view text, size_t begin) {
  size_t length = utf8::ValidSequenceLength(text, begin);
  return utf8::DecodeAt(text, begin, length == 0 ? 1 : length);
}

// Start of the run of whitespace that ends at `end`.
size_t WhitespaceRunStart(std::string_view text, size_t end) {
  while (end > 0) {
    size_t begin = end - 1;
    while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
    if (!utf8::IsWhitespace(utf8::DecodeAt(text, begin, end - begin))) break;
    end = begin;
  }
  return end;
}

// End of the run of whitespace that starts at `begin`.
size_t WhitespaceRunEnd(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t length = utf8::ValidSequenceLength(text, begin);
    if (length == 0 || !utf8::IsWhitespace(utf8::DecodeAt(text, begin, length))) break;
    begin += length;
  }
  return begin;
}

}  // namespace

void TokenTrie::Add(std::string_view text, int32_t token_index) {
  if (text.empty()) return;
  int32_t node = 0;
  for (char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    auto [it, inserted] = edges_.try_emplace(EdgeKey(node, byte), 0);
    if (inserted) {
      it->second = static_cast<int32_t>(terminal_.size());
      terminal_.push_back(-1);
    }
    node = it->second;
  }
  first_byte_[static_cast<uint8_t>(text[0])] = true;
  // Two tokens with the same text: the later one wins, like a map built from the list.
  terminal_[node] = token_index;
}

std::pair<size_t, int32_t> TokenTrie::LongestAt(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best = {0, -1};
  if (!first_byte_[static_cast<uint8_t>(text[pos])]) return best;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find(EdgeKey(node, static_cast<uint8_t>(text[i])));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) best = {i + 1 - pos, terminal_[node]};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens,
                                 const std::vector<std::string>& normalized_forms)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const auto index = static_cast<int32_t>(i);
    if (tokens_[i].normalized) {
      normalized_.Add(normalized_forms[i], index);
    } else {
      raw_.Add(tokens_[i].content, index);
    }
  }
}

// Port of AddedVocabulary::find_matches.
std::vector<Segment> AddedVocabulary::Split(std::string_view text, const TokenTrie& trie) const {
  std::vector<Segment> segments;
  size_t start_offset = 0;
  size_t search = 0;
  while (!trie.empty() && search < text.size()) {
    const auto [length, index] = trie.LongestAt(text, search);
    if (index < 0) {
      ++search;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = search;
    size_t end = search + length;
    search = end;  // The matcher resumes after this match even when the rules discard it.
    if (token.single_word) {
      const bool space_before = begin == 0 || !IsWordChar(CharBefore(text, begin));
      const bool space_after = end == text.size() || !IsWordChar(CharAt(text, end));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) begin = std::max(WhitespaceRunStart(text, begin), start_offset);
    if (token.rstrip) end = WhitespaceRunEnd(text, end);
    search = end;
    if (start_offset < begin) segments.push_back({start_offset, begin, -1});
    segments.push_back({begin, end, token.id});
    start_offset = end;
  }
  if (start_offset != text.size() || segments.empty()) {
    segments.push_back({start_offset, text.size(), -1});
  }
  return segments;
}

}  // namespace exa::engine
