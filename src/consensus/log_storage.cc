#include "consensus/log_storage.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace exa::consensus {

void DropCoveredEntries(StoredState& state, uint64_t snapshot_index, uint64_t trailing) {
  if (trailing == 0) {
    state.entries.clear();
    state.first_index = snapshot_index + 1;
    return;
  }
  uint64_t keep_from = snapshot_index > trailing ? snapshot_index - trailing + 1 : 1;
  if (keep_from <= state.first_index) return;
  uint64_t drop = std::min<uint64_t>(keep_from - state.first_index, state.entries.size());
  state.entries.erase(state.entries.begin(), state.entries.begin() + static_cast<ptrdiff_t>(drop));
  state.first_index += drop;
}

absl::Status MemoryLogStorage::SetTermVote(uint64_t term, uint64_t voted_for) {
  state_.term = term;
  state_.voted_for = voted_for;
  return absl::OkStatus();
}

absl::Status MemoryLogStorage::Append(uint64_t first_index,
                                      const std::vector<StoredEntry>& entries) {
  uint64_t last = state_.first_index + state_.entries.size();
  if (first_index < state_.first_index || first_index > last) {
    return absl::InternalError(absl::StrCat("raft log: append at ", first_index, " outside [",
                                            state_.first_index, ", ", last, "]"));
  }
  state_.entries.resize(first_index - state_.first_index);
  state_.entries.insert(state_.entries.end(), entries.begin(), entries.end());
  return absl::OkStatus();
}

absl::Status MemoryLogStorage::TruncateFrom(uint64_t index) {
  if (index <= state_.first_index) {
    state_.entries.clear();
    return absl::OkStatus();
  }
  uint64_t keep = index - state_.first_index;
  if (keep < state_.entries.size()) state_.entries.resize(keep);
  return absl::OkStatus();
}

absl::Status MemoryLogStorage::PutSnapshot(const StoredSnapshot& snapshot, uint64_t trailing) {
  state_.snapshot = snapshot;
  DropCoveredEntries(state_, snapshot.index, trailing);
  return absl::OkStatus();
}

}  // namespace exa::consensus
