// The node agent's fence against a deposed scheduler leader (docs/architecture.md#consistency):
// it remembers the highest Raft term that commanded this node and refuses StartReplica,
// StopReplica and StageModel from a lower one, so a leader that lost its term to another and
// still has commands in flight changes nothing. Term 0 (an operator's own command through
// exaserve-cli) is always let through. In memory: a restarted agent starts at 0 again.
//
// Thread safety: Admit may be called from any gRPC thread.
#pragma once

#include <cstdint>
#include <string_view>
#include "absl/synchronization/mutex.h"

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"

namespace exa::node {

class TermFence {
 public:
  // OK, and `term` remembered when higher; FAILED_PRECONDITION naming both terms when lower.
  absl::Status Admit(uint64_t term, std::string_view method);
  uint64_t highest() const;

 private:
  mutable absl::Mutex mu_;
  uint64_t highest_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace exa::node
