// LogStorage in RocksDB (docs/architecture.md#consistency): one database per node under
// <data_dir>/raft, every change written with sync=true before the call returns.
//   "meta"                term and vote
//   "snap"                the latest snapshot (index, term, configuration, state)
//   "e" + index (8 bytes, big-endian)   one log entry: term, type, data
// Thread safety: none; the RaftNode's owner calls it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "consensus/log_storage.h"

namespace rocksdb {
class DB;
}

namespace exa::consensus {

class RocksLogStorage final : public LogStorage {
 public:
  // Opens or creates the database at `path`.
  static absl::StatusOr<std::unique_ptr<RocksLogStorage>> Open(const std::string& path);
  ~RocksLogStorage() override;

  absl::StatusOr<StoredState> Load() override;
  absl::Status SetTermVote(uint64_t term, uint64_t voted_for) override;
  absl::Status Append(uint64_t first_index, const std::vector<StoredEntry>& entries) override;
  absl::Status TruncateFrom(uint64_t index) override;
  absl::Status PutSnapshot(const StoredSnapshot& snapshot, uint64_t trailing) override;

  // Whether nothing was ever stored (no term, no entry, no snapshot).
  bool Empty() const { return empty_; }

 private:
  RocksLogStorage(std::string path, std::unique_ptr<rocksdb::DB> db);

  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  uint64_t first_index_ = 1;  // of the first stored entry (or where it will go)
  uint64_t next_index_ = 1;   // one past the last stored entry
  bool empty_ = true;
};

// The snapshot's byte form, shared by the storage and its tests.
std::string EncodeSnapshot(const StoredSnapshot& snapshot);
absl::StatusOr<StoredSnapshot> DecodeSnapshot(std::string_view bytes);

}  // namespace exa::consensus
