// The memory ledger of an inference node: what each device has promised to whom, so a
// replica is refused before it starts rather than failing half-loaded, and two replicas never
// count on the same bytes. Device -1 is host memory (cpu and sim replicas); 0..N-1 are GPUs.
// A capacity of 0 means "not accounted" (every reservation fits).
//
// Thread safety: none; ReplicaHost guards it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace exa::node {

class MemoryLedger {
 public:
  void SetCapacity(int device, int64_t bytes) { capacity_[device] = bytes; }
  int64_t capacity(int device) const;
  int64_t used(int device) const;
  // Capacity minus used; a large number where the device is not accounted.
  int64_t free(int device) const;

  // Reserves `bytes` on `device` under `holder` (a replica id, or "weights:<model>/<device>" for
  // weights shared by that device's replicas). FAILED_PRECONDITION naming the device, the bytes
  // asked, the bytes free and the capacity when they do not fit; ALREADY_EXISTS for a holder that
  // already holds a reservation.
  absl::Status Reserve(const std::string& holder, int device, int64_t bytes);
  // Returns the bytes `holder` held (0 when none).
  int64_t Release(const std::string& holder);
  bool Holds(const std::string& holder) const { return holds_.count(holder) > 0; }

  // Among `devices`, the one with the most free bytes that can take `bytes`; -1 when none can.
  int BestFit(const std::vector<int>& devices, int64_t bytes) const;

 private:
  struct Hold {
    int device = -1;
    int64_t bytes = 0;
  };
  std::map<int, int64_t> capacity_;
  std::map<int, int64_t> used_;
  std::map<std::string, Hold> holds_;
};

}  // namespace exa::node
