// A model's vocabulary as a trie of the bytes each token adds to the output, for structured
// outputs (json_constraint.h): one walk over it with a matcher finds every token that may come
// next, sharing the work of common prefixes ("{\"", "{\"name", ...).
//
// Thread safety: immutable once built; shared by every sequence of a model.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace exa::engine::structured {

class TokenTrie {
 public:
  // `token_bytes[id]`: the bytes token `id` adds to the output; nullopt or empty for tokens never
  // allowed in structured output (special tokens, tokens that add nothing).
  explicit TokenTrie(const std::vector<std::optional<std::string>>& token_bytes);

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  // The token's bytes; empty for tokens never allowed.
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  size_t node_count() const { return nodes_.size(); }

  struct Node {
    uint32_t first_edge = 0;
    uint32_t edge_count = 0;
    uint32_t first_token = 0;  // into the sorted ids: the tokens whose bytes end here
    uint32_t token_count = 0;
    uint32_t subtree_end = 0;  // the subtree's tokens are the sorted ids [first_token, this)
    // Every token below is plain string text: whole UTF-8 characters, none a quote, backslash or
    // control character. Inside a JSON string they all may come and change nothing.
    bool plain = false;
    uint32_t max_chars = 0;  // the most characters of a token below (when plain)
  };
  static constexpr uint32_t kRoot = 0;
  const Node& node(uint32_t n) const { return nodes_[n]; }
  uint8_t edge_byte(uint32_t e) const { return edge_bytes_[e]; }
  uint32_t edge_child(uint32_t e) const { return edge_children_[e]; }
  std::span<const int32_t> tokens_at(const Node& n) const {
    return std::span<const int32_t>(ids_).subspan(n.first_token, n.token_count);
  }
  std::span<const int32_t> subtree_tokens(const Node& n) const {
    return std::span<const int32_t>(ids_).subspan(n.first_token, n.subtree_end - n.first_token);
  }
  size_t max_depth() const { return max_depth_; }

 private:
  uint32_t Build(size_t lo, size_t hi, size_t depth);

  std::vector<std::string> bytes_;
  std::vector<int32_t> ids_;  // allowed tokens sorted by their bytes
  std::vector<Node> nodes_;
  std::vector<uint8_t> edge_bytes_;
  std::vector<uint32_t> edge_children_;
  size_t max_depth_ = 0;
};

}  // namespace exa::engine::structured
