#include "engine/structured/json_constraint.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace exa::engine::structured {

JsonConstraint::JsonConstraint(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_ids)
    : matcher_(std::move(grammar)),
      trie_(std::move(trie)),
      end_ids_(std::move(end_ids)),
      levels_(trie_->max_depth() + 1) {}

bool JsonConstraint::IsEnd(int32_t token) const {
  return std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
}

void JsonConstraint::Walk(uint32_t n, size_t level) {
  const TokenTrie::Node& node = trie_->node(n);
  for (uint32_t e = node.first_edge; e < node.first_edge + node.edge_count; ++e) {
    std::vector<Stack>& next = levels_[level + 1];
    next.clear();
    if (!matcher_.Step(levels_[level], trie_->edge_byte(e), &next, &scratch_)) continue;
    const uint32_t c = trie_->edge_child(e);
    const TokenTrie::Node& child = trie_->node(c);
    for (const int32_t id : trie_->tokens_at(child)) allowed_[static_cast<size_t>(id)] = 1;
    if (child.edge_count > 0) Walk(c, level + 1);
  }
}

void JsonConstraint::FindAllowed() {
  allowed_.assign(static_cast<size_t>(trie_->vocab_size()), 0);
  scratch_.Reset();
  levels_[0].assign(matcher_.stacks().begin(), matcher_.stacks().end());
  if (!matcher_.Terminal()) Walk(TokenTrie::kRoot, 0);
}

std::vector<int32_t> JsonConstraint::Allowed() {
  FindAllowed();
  std::vector<int32_t> ids;
  for (size_t id = 0; id < allowed_.size(); ++id) {
    if (allowed_[id] != 0) ids.push_back(static_cast<int32_t>(id));
  }
  if (matcher_.Complete()) {
    for (const int32_t id : end_ids_) {
      if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
  }
  return ids;
}

bool JsonConstraint::Mask(std::span<float> logits) {
  FindAllowed();
  const bool complete = matcher_.Complete();
  bool any = false;
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  for (size_t id = 0; id < logits.size(); ++id) {
    const bool ok = (id < allowed_.size() && allowed_[id] != 0) ||
                    (complete && IsEnd(static_cast<int32_t>(id)));
    if (ok) {
      any = true;
    } else {
      logits[id] = kBanned;
    }
  }
  return any;
}

bool JsonConstraint::Follow(int32_t token, bool commit) {
  if (IsEnd(token)) return matcher_.Complete();
  if (token < 0 || token >= trie_->vocab_size()) return false;
  const std::string& bytes = trie_->bytes(token);
  if (bytes.empty()) return false;
  return commit ? matcher_.Advance(bytes) : matcher_.Accepts(bytes);
}

}  // namespace exa::engine::structured
