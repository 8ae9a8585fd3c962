// Which gateway dispatches each local replica has admitted, so that a load report can say what
// it already counts (docs/architecture.md#load-on-change). A gateway numbers its dispatches
// (NodeGenerateRequest.dispatcher, .dispatch); Generate notes each one once the replica's engine
// has taken it, and every report tells its watcher the highest number noted for it per replica.
// A report read before a dispatch arrived therefore does not clear that dispatch from the
// gateway's count.
//
// Bounded: at most kMaxDispatchers gateways per replica (the least recently heard is forgotten,
// and its next report just says 0), and only the replicas a snapshot names are kept.
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace exa::node {

class AdmittedDispatches {
 public:
  static constexpr size_t kMaxDispatchers = 128;

  // By replica id, by dispatcher: the highest dispatch admitted.
  using Marks = absl::flat_hash_map<std::string, absl::flat_hash_map<uint64_t, uint64_t>>;

  // Replica `replica` admitted `dispatch` from `dispatcher`; either 0: not numbered, ignored.
  void Note(const std::string& replica, uint64_t dispatcher, uint64_t dispatch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The marks of `replicas`; those of any other replica are dropped (it is gone). Read it
  // before the replicas' load, so that every dispatch it names is in that load.
  std::shared_ptr<const Marks> Snapshot(std::span<const std::string> replicas)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Mark {
    uint64_t dispatch = 0;
    uint64_t heard = 0;  // the note count when last raised, for choosing whom to forget
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::flat_hash_map<uint64_t, Mark>> marks_ ABSL_GUARDED_BY(mu_);
  uint64_t notes_ ABSL_GUARDED_BY(mu_) = 0;
};

// The highest dispatch of `dispatcher` that `marks` says `replica` admitted; 0 when none.
uint64_t AdmittedOf(const AdmittedDispatches::Marks& marks, const std::string& replica,
                    uint64_t dispatcher);

}  // namespace exa::node
