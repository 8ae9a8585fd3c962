#include "membership/broadcast_queue.h"

#include <cmath>

namespace exa::membership {

void BroadcastQueue::Queue(const std::string& node, std::string encoded, bool alive) {
  auto it = items_.find(node);
  if (it != items_.end()) {
    order_.erase(it->second.key);
    items_.erase(it);
  }
  Item& item = items_[node];
  item.node = node;
  item.encoded = std::move(encoded);
  item.key = Key{alive ? 0 : 1, 0, -next_id_++, &item};
  order_.insert(item.key);
  while (items_.size() > max_items_) DropWorst();
}

std::vector<std::string> BroadcastQueue::Take(size_t overhead_bytes, size_t limit_bytes,
                                              int transmit_limit) {
  // Once this many queued messages did not fit, the packet is as full as it will get; this
  // keeps a long queue (after a partition heals) from costing a full scan per packet.
  constexpr int kMaxMisses = 16;
  std::vector<std::string> out;
  std::vector<Key> sent;
  size_t used = 0;
  int misses = 0;
  for (const Key& key : order_) {
    if (used + overhead_bytes >= limit_bytes || misses >= kMaxMisses) break;
    size_t cost = key.item->encoded.size() + overhead_bytes;
    if (used + cost > limit_bytes) {
      misses++;
      continue;
    }
    used += cost;
    out.push_back(key.item->encoded);
    sent.push_back(key);
  }
  for (const Key& key : sent) {
    order_.erase(key);
    Item* item = key.item;
    if (key.transmits + 1 >= transmit_limit) {
      items_.erase(item->node);
      continue;
    }
    item->key.transmits++;
    order_.insert(item->key);
  }
  return out;
}

void BroadcastQueue::Clear() {
  items_.clear();
  order_.clear();
}

void BroadcastQueue::DropWorst() {
  auto last = std::prev(order_.end());
  std::string node = last->item->node;
  order_.erase(last);
  items_.erase(node);
}

int RetransmitLimit(int mult, size_t n) {
  return mult * static_cast<int>(std::ceil(std::log10(static_cast<double>(n) + 1.0)));
}

}  // namespace exa::membership
