// The leaderless spec store that scheduler nodes kept before the Raft log
// (docs/architecture.md#consistency): read once, at start, so its records can be imported.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/replicated_store.h"

namespace exa::scheduler {

// The live records under `path` (none when it does not exist); an error names the path.
absl::StatusOr<std::vector<StoreRecord>> ReadLegacyStore(const std::string& path);

}  // namespace exa::scheduler
