#include "engine/structured/token_trie.h"

#include <algorithm>
#include <string_view>

namespace exa::engine::structured {
namespace {

// Whole UTF-8 characters (RFC 3629), none a quote, backslash or control character.
bool IsPlainText(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      if (b < 0x20 || b == '"' || b == '\\' || b == 0x7F) return false;
      ++i;
      continue;
    }
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      n = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace

TokenTrie::TokenTrie(const std::vector<std::optional<std::string>>& token_bytes) {
  bytes_.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    bytes_.push_back(token_bytes[id].value_or(std::string()));
    if (!bytes_.back().empty()) ids_.push_back(static_cast<int32_t>(id));
  }
  std::sort(ids_.begin(), ids_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  Build(0, ids_.size(), 0);
}

// The node for the tokens ids_[lo, hi), which share their first `depth` bytes.
uint32_t TokenTrie::Build(size_t lo, size_t hi, size_t depth) {
  const auto index = static_cast<uint32_t>(nodes_.size());
  nodes_.emplace_back();
  max_depth_ = std::max(max_depth_, depth);
  auto length = [&](size_t i) { return bytes_[static_cast<size_t>(ids_[i])].size(); };
  auto byte_at = [&](size_t i) {
    return static_cast<uint8_t>(bytes_[static_cast<size_t>(ids_[i])][depth]);
  };
  // Tokens that end here sort first.
  size_t i = lo;
  while (i < hi && length(i) == depth) ++i;
  nodes_[index].first_token = static_cast<uint32_t>(lo);
  nodes_[index].token_count = static_cast<uint32_t>(i - lo);
  std::vector<std::pair<size_t, size_t>> groups;
  while (i < hi) {
    size_t j = i + 1;
    while (j < hi && byte_at(j) == byte_at(i)) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  const auto first_edge = static_cast<uint32_t>(edge_bytes_.size());
  nodes_[index].first_edge = first_edge;
  nodes_[index].edge_count = static_cast<uint32_t>(groups.size());
  for (const auto& [a, b] : groups) {
    edge_bytes_.push_back(byte_at(a));
    edge_children_.push_back(0);
  }
  bool plain = true;
  uint32_t max_chars = 0;
  for (size_t t = lo; t < lo + nodes_[index].token_count && plain; ++t) {
    const std::string& b = bytes_[static_cast<size_t>(ids_[t])];
    plain = IsPlainText(b);
    // Characters: the bytes that are not UTF-8 continuation bytes.
    const auto chars = std::count_if(b.begin(), b.end(), [](char c) { return (c & 0xC0) != 0x80; });
    max_chars = std::max(max_chars, static_cast<uint32_t>(chars));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const uint32_t child = Build(groups[g].first, groups[g].second, depth + 1);
    edge_children_[first_edge + g] = child;
    plain = plain && nodes_[child].plain;
    max_chars = std::max(max_chars, nodes_[child].max_chars);
  }
  nodes_[index].subtree_end = static_cast<uint32_t>(hi);
  nodes_[index].plain = plain;
  nodes_[index].max_chars = max_chars;
  return index;
}

}  // namespace exa::engine::structured
