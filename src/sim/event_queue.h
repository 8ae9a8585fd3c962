// The simulators' event queue (docs/testing.md: virtual time): events come out in time order,
// and events due at the same time in the order they were pushed. That tie order is what keeps a
// seed's run bit-identical: both simulators ordered by (time, push sequence) before this was
// shared, and a heap alone would break ties arbitrarily.
// Thread-safety: none; a simulation runs on one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace exa::sim {

template <typename Event>
class EventQueue {
 public:
  struct Due {
    absl::Time at;
    Event event;
  };

  void Push(absl::Time at, Event event) {
    heap_.push_back(Entry{at, next_sequence_++, std::move(event)});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  bool empty() const { return heap_.empty(); }

  // Removes and returns the earliest event; of those due at once, the first pushed.
  Due Pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    Entry entry = std::move(heap_.back());
    heap_.pop_back();
    return Due{entry.at, std::move(entry.event)};
  }

  // Pops events in order and hands each to handle(at, event) until the queue is empty or the
  // next event is due after `end`, which is read before each event (a handler may move it); that
  // event is dropped.
  template <typename Handle>
  void RunUntil(const absl::Time& end, Handle&& handle) {
    while (!empty()) {
      Due due = Pop();
      if (due.at > end) return;
      handle(due.at, due.event);
    }
  }

 private:
  struct Entry {
    absl::Time at;
    uint64_t sequence;
    Event event;
  };
  // The heap's order: a max-heap on "later", so the front is the earliest.
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.at != b.at ? a.at > b.at : a.sequence > b.sequence;
    }
  };

  std::vector<Entry> heap_;
  uint64_t next_sequence_ = 0;
};

}  // namespace exa::sim
