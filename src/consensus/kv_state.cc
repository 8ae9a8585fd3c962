#include "consensus/kv_state.h"

#include "absl/strings/str_cat.h"
#include "common/byte_io.h"

namespace exa::consensus {
namespace {

constexpr uint8_t kCommandVersion = 1;
constexpr uint8_t kSnapshotVersion = 1;

}  // namespace

std::string EncodeKvCommand(const KvCommand& command) {
  ByteWriter w;
  w.U8(kCommandVersion);
  w.Bytes(command.request_id);
  w.U32(static_cast<uint32_t>(command.ops.size()));
  for (const KvOp& op : command.ops) {
    w.U8(static_cast<uint8_t>((op.value ? 1 : 0) | (op.expected_version ? 2 : 0)));
    w.Bytes(op.key);
    if (op.value) w.Bytes(*op.value);
    if (op.expected_version) w.U64(*op.expected_version);
  }
  return w.Take();
}

absl::StatusOr<KvCommand> DecodeKvCommand(std::string_view bytes, const KvLimits& limits) {
  ByteReader r(bytes);
  if (r.U8() != kCommandVersion) return absl::InvalidArgumentError("kv command: unknown version");
  KvCommand command;
  command.request_id = std::string(r.Bytes(256));
  uint32_t n = r.U32();
  if (!r.ok() || n > limits.max_ops) return absl::InvalidArgumentError("kv command: op count");
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    KvOp op;
    uint8_t flags = r.U8();
    op.key = std::string(r.Bytes(limits.max_key_bytes));
    if (flags & 1) op.value = std::string(r.Bytes(limits.max_value_bytes));
    if (flags & 2) op.expected_version = r.U64();
    if (flags > 3 || op.key.empty()) r.Fail();
    command.ops.push_back(std::move(op));
  }
  if (!r.done()) return absl::InvalidArgumentError("kv command: malformed");
  return command;
}

std::string EncodeKvResult(const KvResult& result) {
  ByteWriter w;
  w.U8(result.ok ? 1 : 0);
  w.U64(result.index);
  w.Bytes(result.error);
  w.Bytes(result.conflict_key);
  w.U64(result.expected_version);
  w.U64(result.actual_version);
  return w.Take();
}

absl::StatusOr<KvResult> DecodeKvResult(std::string_view bytes) {
  ByteReader r(bytes);
  KvResult result;
  result.ok = r.U8() == 1;
  result.index = r.U64();
  result.error = std::string(r.Bytes(1u << 16));
  result.conflict_key = std::string(r.Bytes(1u << 16));
  result.expected_version = r.U64();
  result.actual_version = r.U64();
  if (!r.done()) return absl::InvalidArgumentError("kv result: malformed");
  return result;
}

KvResult KvState::Execute(uint64_t index, const KvCommand& command) {
  KvResult result;
  result.index = index;
  size_t added = 0;
  for (const KvOp& op : command.ops) {
    const KvRecord* current = Get(op.key);
    uint64_t actual = current != nullptr ? current->version : 0;
    if (op.expected_version && *op.expected_version != actual) {
      result.conflict_key = op.key;
      result.expected_version = *op.expected_version;
      result.actual_version = actual;
      result.error = absl::StrCat(op.key, " is at version ", actual, ", not ", *op.expected_version,
                                  " as the write expected");
      return result;
    }
    if (op.value && current == nullptr) ++added;
  }
  if (records_.size() + added > limits_.max_records) {
    result.error = absl::StrCat("the store holds at most ", limits_.max_records, " records");
    return result;
  }
  for (const KvOp& op : command.ops) {
    if (op.value) {
      records_[op.key] = KvRecord{*op.value, index};
    } else {
      records_.erase(op.key);
    }
  }
  result.ok = true;
  return result;
}

std::string KvState::Apply(uint64_t index, std::string_view bytes) {
  applied_ = index;
  absl::StatusOr<KvCommand> command = DecodeKvCommand(bytes, limits_);
  if (!command.ok()) {
    KvResult refused;
    refused.index = index;
    refused.error = std::string(command.status().message());
    return EncodeKvResult(refused);
  }
  if (!command->request_id.empty()) {
    auto it = answered_.find(command->request_id);
    if (it != answered_.end()) return it->second;
  }
  std::string answer = EncodeKvResult(Execute(index, *command));
  if (!command->request_id.empty()) {
    answered_.emplace(command->request_id, answer);
    answered_order_.push_back(command->request_id);
    while (answered_order_.size() > limits_.max_request_ids) {
      answered_.erase(answered_order_.front());
      answered_order_.pop_front();
    }
  }
  return answer;
}

const KvRecord* KvState::Get(const std::string& key) const {
  auto it = records_.find(key);
  return it == records_.end() ? nullptr : &it->second;
}

std::string KvState::Snapshot() const {
  ByteWriter w;
  w.U8(kSnapshotVersion);
  w.U64(applied_);
  w.U32(static_cast<uint32_t>(records_.size()));
  for (const auto& [key, record] : records_) {
    w.Bytes(key);
    w.Bytes(record.value);
    w.U64(record.version);
  }
  w.U32(static_cast<uint32_t>(answered_order_.size()));
  for (const std::string& id : answered_order_) {
    w.Bytes(id);
    w.Bytes(answered_.at(id));
  }
  return w.Take();
}

absl::Status KvState::Restore(std::string_view snapshot) {
  ByteReader r(snapshot);
  if (r.U8() != kSnapshotVersion) return absl::DataLossError("kv snapshot: unknown version");
  uint64_t applied = r.U64();
  std::map<std::string, KvRecord> records;
  uint32_t n = r.U32();
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    std::string key(r.Bytes(limits_.max_key_bytes));
    KvRecord record{std::string(r.Bytes(limits_.max_value_bytes)), 0};
    record.version = r.U64();
    records.emplace(std::move(key), std::move(record));
  }
  std::map<std::string, std::string> answered;
  std::deque<std::string> order;
  uint32_t m = r.U32();
  for (uint32_t i = 0; i < m && r.ok(); ++i) {
    std::string id(r.Bytes(256));
    answered.emplace(id, std::string(r.Bytes(1u << 20)));
    order.push_back(std::move(id));
  }
  if (!r.done()) return absl::DataLossError("kv snapshot: malformed");
  records_ = std::move(records);
  answered_ = std::move(answered);
  answered_order_ = std::move(order);
  applied_ = applied;
  return absl::OkStatus();
}

}  // namespace exa::consensus
