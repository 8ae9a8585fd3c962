// Infection-style dissemination queue (memberlist TransmitLimitedQueue). Each queued update is
// sent `limit` times (retransmit_mult * ceil(log10(N + 1))), piggybacked on probes and on the
// gossip rounds. A newer update about a node replaces the queued one. Order: alive updates first
// (refutations and joins beat suspicion), then fewest transmits, then newest.
//
// Thread safety: none; owned by one SwimCore.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace exa::membership {

class BroadcastQueue {
 public:
  explicit BroadcastQueue(size_t max_items) : max_items_(max_items) {}

  // Queues an encoded message about `node`; `alive` gives it priority.
  void Queue(const std::string& node, std::string encoded, bool alive);
  // Takes messages that fit in `limit_bytes`, each costing its size + `overhead_bytes`.
  // Every returned message counts one transmit; at `transmit_limit` it retires.
  std::vector<std::string> Take(size_t overhead_bytes, size_t limit_bytes, int transmit_limit);
  size_t size() const { return items_.size(); }
  void Clear();

 private:
  struct Item;
  // Send order: (rank, transmits, -id); `item` rides along for O(1) access.
  struct Key {
    int rank;
    int transmits;
    int64_t neg_id;
    Item* item;
    bool operator<(const Key& o) const {
      return std::tie(rank, transmits, neg_id) < std::tie(o.rank, o.transmits, o.neg_id);
    }
  };
  struct Item {
    std::string node;
    std::string encoded;
    Key key;
  };

  void DropWorst();

  size_t max_items_;
  int64_t next_id_ = 0;
  std::unordered_map<std::string, Item> items_;  // node-based: Item* stays valid
  std::set<Key> order_;
};

// memberlist retransmitLimit: mult * ceil(log10(n + 1)).
int RetransmitLimit(int mult, size_t n);

}  // namespace exa::membership
