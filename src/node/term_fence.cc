#include "node/term_fence.h"

#include "absl/strings/str_cat.h"

namespace exa::node {

absl::Status TermFence::Admit(uint64_t term, std::string_view method) {
  if (term == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (term < highest_) {
    return absl::FailedPreconditionError(
        absl::StrCat(std::string(method), " from scheduler term ", term, " refused: term ",
                     highest_, " has commanded this node (the sender is no longer the leader)"));
  }
  highest_ = term;
  return absl::OkStatus();
}

uint64_t TermFence::highest() const {
  absl::MutexLock lock(&mu_);
  return highest_;
}

}  // namespace exa::node
