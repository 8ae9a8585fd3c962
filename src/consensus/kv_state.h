// The spec store's replicated state machine (docs/architecture.md#consistency): a map of keys to
// records, each stamped with the Raft index that last wrote it (its resource version).
// A command is a transaction: every op is applied or none; an op may name the version it read
// (0: "the key must not exist"), and a stale one refuses the whole transaction, naming the key
// and both versions. A command carries a request id; a retry of an id already applied gets the
// first answer again instead of applying twice (the last `max_request_ids` ids are kept, in the
// snapshot too). Limits (records, value size) are checked at apply, the same way on every node.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "consensus/raft_node.h"

namespace exa::consensus {

struct KvRecord {
  std::string value;
  uint64_t version = 0;  // the Raft index of the write that made this value
  bool operator==(const KvRecord&) const = default;
};

struct KvOp {
  std::string key;
  std::optional<std::string> value;  // nullopt: delete
  // The version the writer read: 0 means the key must not exist; nullopt: unconditional.
  std::optional<uint64_t> expected_version;
};

struct KvCommand {
  std::string request_id;  // unique per client request; a retry reuses it
  std::vector<KvOp> ops;
};

struct KvResult {
  bool ok = false;
  uint64_t index = 0;  // the version the writes got
  std::string error;   // why not (a conflict names the key and both versions)
  std::string conflict_key;
  uint64_t expected_version = 0;
  uint64_t actual_version = 0;  // 0: absent
};

struct KvLimits {
  size_t max_records = 10000;
  size_t max_key_bytes = 512;
  size_t max_value_bytes = 1u << 20;
  size_t max_ops = 1000;
  size_t max_request_ids = 10000;
};

std::string EncodeKvCommand(const KvCommand& command);
absl::StatusOr<KvCommand> DecodeKvCommand(std::string_view bytes, const KvLimits& limits);
std::string EncodeKvResult(const KvResult& result);
absl::StatusOr<KvResult> DecodeKvResult(std::string_view bytes);

class KvState final : public StateMachine {
 public:
  explicit KvState(KvLimits limits = {}) : limits_(limits) {}

  std::string Apply(uint64_t index, std::string_view command) override;
  std::string Snapshot() const override;
  absl::Status Restore(std::string_view snapshot) override;

  const KvRecord* Get(const std::string& key) const;
  const std::map<std::string, KvRecord>& records() const { return records_; }
  uint64_t applied_index() const { return applied_; }

 private:
  KvResult Execute(uint64_t index, const KvCommand& command);

  KvLimits limits_;
  std::map<std::string, KvRecord> records_;
  std::map<std::string, std::string> answered_;  // request id → encoded KvResult
  std::deque<std::string> answered_order_;       // oldest first, for the bound
  uint64_t applied_ = 0;
};

}  // namespace exa::consensus
