// The node agent's fence against a deposed scheduler leader (docs/architecture.md#consistency):
// it remembers the highest Raft term that commanded this node and refuses StartReplica,
// StopReplica and StageModel from a lower one, so a leader that lost its term to another and
// still has commands in flight changes nothing. Term 0 (an operator's own command through
// exaserve-cli) is always let through.
//
// With a path, the highest term is kept in that file (written atomically when it rises, which
// happens once per leader change), so a restarted agent still refuses a deposed leader; without
// one it lives in memory and a restart starts at 0 again.
//
// Thread safety: Admit may be called from any gRPC thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace exa::node {

class TermFence {
 public:
  TermFence() = default;
  // Reads the term a previous run stored at `path` (none yet: 0). INVALID_ARGUMENT naming the
  // file when it holds anything but a decimal term; other read errors name the file too.
  absl::Status Open(std::string path);

  // OK, and `term` remembered when higher; FAILED_PRECONDITION naming both terms when lower.
  // A higher term that cannot be stored is still admitted (the leader is legitimate) and the
  // write error is logged: the fence then holds in memory until the next restart.
  absl::Status Admit(uint64_t term, std::string_view method);
  uint64_t highest() const;

 private:
  mutable absl::Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  uint64_t highest_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace exa::node
