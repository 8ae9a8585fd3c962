// Where a Raft node keeps what must survive a crash (docs/architecture.md#consistency): its term
// and vote, its log, and its latest snapshot. RaftNode calls these synchronously; each returns
// only once the change is durable. MemoryLogStorage keeps it in memory, for tests and the
// simulator (the object outlives a "crashed" node, as a disk would); RocksLogStorage
// (rocks_log_storage.h) keeps it in RocksDB.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace exa::consensus {

struct StoredEntry {
  uint64_t term = 0;
  uint16_t type = 0;  // RAFT_COMMAND, RAFT_BARRIER or RAFT_CHANGE
  std::string data;
  bool operator==(const StoredEntry&) const = default;
};

struct StoredServer {
  uint64_t id = 0;
  std::string address;  // the node id
  int role = 0;         // RAFT_VOTER, RAFT_STANDBY or RAFT_SPARE
  bool operator==(const StoredServer&) const = default;
};

struct StoredSnapshot {
  uint64_t index = 0;
  uint64_t term = 0;
  std::vector<StoredServer> configuration;
  uint64_t configuration_index = 0;
  std::string data;  // the state machine's snapshot
};

struct StoredState {
  uint64_t term = 0;
  uint64_t voted_for = 0;
  std::optional<StoredSnapshot> snapshot;
  uint64_t first_index = 1;  // the index of entries[0]
  std::vector<StoredEntry> entries;
};

class LogStorage {
 public:
  virtual ~LogStorage() = default;
  virtual absl::StatusOr<StoredState> Load() = 0;
  virtual absl::Status SetTermVote(uint64_t term, uint64_t voted_for) = 0;
  // Appends `entries` at `first_index` onwards (replacing anything stored there and after).
  virtual absl::Status Append(uint64_t first_index, const std::vector<StoredEntry>& entries) = 0;
  // Drops the entries at `index` and after.
  virtual absl::Status TruncateFrom(uint64_t index) = 0;
  // Stores `snapshot` and drops the entries it covers except the last `trailing` of them;
  // trailing == 0 (a snapshot installed from the leader) drops every entry.
  virtual absl::Status PutSnapshot(const StoredSnapshot& snapshot, uint64_t trailing) = 0;
};

class MemoryLogStorage final : public LogStorage {
 public:
  absl::StatusOr<StoredState> Load() override { return state_; }
  absl::Status SetTermVote(uint64_t term, uint64_t voted_for) override;
  absl::Status Append(uint64_t first_index, const std::vector<StoredEntry>& entries) override;
  absl::Status TruncateFrom(uint64_t index) override;
  absl::Status PutSnapshot(const StoredSnapshot& snapshot, uint64_t trailing) override;

  const StoredState& state() const { return state_; }

 private:
  StoredState state_;
};

// The shared bookkeeping of both storages: what is left of `state` after PutSnapshot.
void DropCoveredEntries(StoredState& state, uint64_t snapshot_index, uint64_t trailing);

}  // namespace exa::consensus
