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
  std::vector<uint64_t>& bits = cache_.back().bits;
  for (uint32_t e = node.first_edge; e < node.first_edge + node.edge_count; ++e) {
    std::vector<Stack>& next = levels_[level + 1];
    next.clear();
    if (!matcher_.Step(levels_[level], trie_->edge_byte(e), &next, &scratch_)) continue;
    const uint32_t c = trie_->edge_child(e);
    const TokenTrie::Node& child = trie_->node(c);
    if (child.plain && child.max_chars <= plain_room_) {  // every token below fits the string
      for (const int32_t id : trie_->subtree_tokens(child)) {
        bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
      }
      continue;
    }
    for (const int32_t id : trie_->tokens_at(child)) {
      bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.edge_count > 0) Walk(c, level + 1);
  }
}

std::string JsonConstraint::StateKey() const {
  std::string key;
  auto put = [&key](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  for (Stack s : matcher_.stacks()) {
    for (const Frame* f = s; f != nullptr; f = f->parent) {
      put(f->node), put(f->phase), put(f->ws), put(f->sub), put(f->depth), put(f->member);
      put(f->count), put(f->seen), put(f->candidates), put(f->free_key), put(f->negative);
      put(f->int_digits), put(f->frac_digits);
    }
    key.push_back('|');
  }
  return key;
}

void JsonConstraint::FindAllowed() {
  std::string key = StateKey();
  ++uses_;
  for (CachedMask& m : cache_) {
    if (m.state == key) {
      m.last_used = uses_;
      allowed_ = &m.bits;
      return;
    }
  }
  // The walk fills the last entry: a new one, or the least recently used.
  if (cache_.size() == kCachedMasks) {
    auto oldest = std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
      return a.last_used < b.last_used;
    });
    std::iter_swap(oldest, cache_.end() - 1);
  } else {
    cache_.emplace_back();
  }
  CachedMask& m = cache_.back();
  m.state = std::move(key);
  m.last_used = uses_;
  m.bits.assign((static_cast<size_t>(trie_->vocab_size()) + 63) / 64, 0);
  scratch_.Reset();
  levels_[0].assign(matcher_.stacks().begin(), matcher_.stacks().end());
  plain_room_ = matcher_.PlainStringRoom();
  if (!matcher_.Terminal()) Walk(TokenTrie::kRoot, 0);
  allowed_ = &m.bits;
}

std::vector<int32_t> JsonConstraint::Allowed() {
  FindAllowed();
  std::vector<int32_t> ids;
  for (size_t id = 0; id < static_cast<size_t>(trie_->vocab_size()); ++id) {
    if (IsAllowed(id) && !IsEnd(static_cast<int32_t>(id))) ids.push_back(static_cast<int32_t>(id));
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
  end_logits_.clear();
  for (const int32_t id : end_ids_) {
    end_logits_.push_back(id >= 0 && static_cast<size_t>(id) < logits.size()
                              ? logits[static_cast<size_t>(id)]
                              : 0.0f);
  }
  FindAllowed();
  const bool complete = matcher_.Complete();
  bool any = false;
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  const size_t vocab = std::min(logits.size(), static_cast<size_t>(trie_->vocab_size()));
  for (size_t id = 0; id < vocab; ++id) {
    if (IsAllowed(id)) {
      any = true;
    } else {
      logits[id] = kBanned;
    }
  }
  for (size_t id = vocab; id < logits.size(); ++id) logits[id] = kBanned;
  // The end ids: allowed only once the value is whole, even where their bytes would fit (an
  // end-of-sequence token not marked special). Their logits are kept aside before the pass.
  for (size_t i = 0; i < end_ids_.size(); ++i) {
    const auto id = static_cast<size_t>(end_ids_[i]);
    if (end_ids_[i] < 0 || id >= logits.size()) continue;
    logits[id] = complete ? end_logits_[i] : kBanned;
    any = any || complete;
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
