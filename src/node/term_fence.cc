#include "node/term_fence.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/logging.h"

namespace exa::node {

absl::Status TermFence::Open(std::string path) {
  uint64_t stored = 0;
  absl::StatusOr<std::string> text = ReadFile(path, 64);
  if (text.ok()) {
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &stored)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": holds '", absl::CEscape(*text),
                       "', not a scheduler term (a decimal number); remove the file to reset it"));
    }
  } else if (!absl::IsNotFound(text.status())) {
    return text.status();
  }
  absl::MutexLock lock(&mu_);
  path_ = std::move(path);
  highest_ = std::max(highest_, stored);
  return absl::OkStatus();
}

absl::Status TermFence::Admit(uint64_t term, std::string_view method) {
  if (term == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (term < highest_) {
    return absl::FailedPreconditionError(
        absl::StrCat(std::string(method), " from scheduler term ", term, " refused: term ",
                     highest_, " has commanded this node (the sender is no longer the leader)"));
  }
  if (term > highest_ && !path_.empty()) {
    // Under the lock, so that two new terms are stored in the order they are admitted.
    if (absl::Status s = WriteFileAtomically(path_, absl::StrCat(term, "\n")); !s.ok()) {
      EXA_LOG_WARN("node", "scheduler term not stored; the fence holds until a restart",
                   {{"term", static_cast<int64_t>(term)}, {"error", s.ToString()}});
    }
  }
  highest_ = term;
  return absl::OkStatus();
}

uint64_t TermFence::highest() const {
  absl::MutexLock lock(&mu_);
  return highest_;
}

}  // namespace exa::node
