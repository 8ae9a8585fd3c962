// The replication logic of the spec store (docs/architecture.md#consistency), sans-IO: a leaderless
// key-value map on every scheduler node.
//   - versions: a hybrid logical clock (physical microseconds + a logical counter, advanced past
//     every version seen) plus the writer's node id, so versions are totally ordered and a later
//     write on any node beats an earlier one even with skewed clocks;
//   - last writer wins: a record replaces another only with a higher version; deletes are
//     tombstones (versioned like writes) so anti-entropy cannot resurrect a deleted spec;
//   - writes go to any scheduler, which sends them to every other scheduler and reports the
//     write acknowledged once a majority of the scheduler set (itself included) holds it; it
//     retries the missing ones until `write_timeout`, then reports the write failed;
//   - anti-entropy: on a change of the scheduler set and every `anti_entropy_interval`, each node
//     sends a digest (key → version) to its peers; a peer answers with the records it holds newer
//     or the sender lacks, and pulls those the sender holds newer.
// "Holds" means persisted: the adapter that owns RocksDB writes each record returned by
// TakePersist() with sync=true before it delivers the messages of the same call (acks included).
//
// Driving it: Write / Delete / Handle / Tick with `now`, then send TakeMessages(), persist
// TakePersist(), and report TakeAcknowledged() / TakeFailed() to the clients.
//
// Thread safety: none; one owner calls every method.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace exa::scheduler {

struct Hlc {
  int64_t wall_us = 0;
  uint32_t logical = 0;
  auto operator<=>(const Hlc&) const = default;
};

// A hybrid logical clock: Now() never goes backwards and is above every timestamp observed.
class HybridClock {
 public:
  Hlc Now(absl::Time physical);
  void Observe(const Hlc& remote);

 private:
  Hlc last_;
};

struct Version {
  Hlc hlc;
  std::string writer;  // node id: breaks ties between equal clocks
  auto operator<=>(const Version&) const = default;
};

struct StoreRecord {
  std::string key;
  std::string value;
  bool deleted = false;
  Version version;
  bool operator==(const StoreRecord&) const = default;
};

struct StoreMessage {
  enum class Type : uint8_t { kPut, kPutAck, kDigest, kPull };
  Type type = Type::kPut;
  std::vector<StoreRecord> records;                       // kPut
  std::vector<std::pair<std::string, Version>> versions;  // kPutAck, kDigest
  std::vector<std::string> keys;                          // kPull
};

struct OutStoreMessage {
  std::string to;
  StoreMessage message;
};

struct StoreConfig {
  absl::Duration retry_interval = absl::Seconds(1);
  absl::Duration write_timeout = absl::Seconds(5);
  absl::Duration anti_entropy_interval = absl::Seconds(10);
  size_t max_records = 10000;  // specs, labels and routes: small (docs/architecture.md#consistency)
  size_t max_value_bytes = 1 << 20;  // one spec's YAML
  size_t max_pending_writes = 1000;
};

class ReplicatedStore {
 public:
  ReplicatedStore(std::string self_id, StoreConfig config = {});

  // Loads what this node persisted before a restart: applied, not persisted again, not sent
  // (anti-entropy repairs what peers lack).
  void Restore(const std::vector<StoreRecord>& records);

  // The scheduler nodes, this one included; a change triggers anti-entropy.
  void SetMembers(absl::Time now, std::vector<std::string> members);

  // Starts a write; the id comes back from TakeAcknowledged() or TakeFailed(). nullopt when
  // refused (value too large, store full, too many writes in flight).
  std::optional<uint64_t> Put(absl::Time now, const std::string& key, const std::string& value);
  std::optional<uint64_t> Delete(absl::Time now, const std::string& key);

  void Handle(absl::Time now, const std::string& from, const StoreMessage& message);
  void Tick(absl::Time now);
  absl::Time NextTick() const;

  std::vector<OutStoreMessage> TakeMessages();
  std::vector<StoreRecord> TakePersist();
  std::vector<uint64_t> TakeAcknowledged();
  std::vector<uint64_t> TakeFailed();

  // The live (not deleted) record for `key`.
  const StoreRecord* Get(const std::string& key) const;
  std::vector<StoreRecord> Live() const;
  size_t Majority() const { return members_.size() / 2 + 1; }

 private:
  struct Pending {
    std::string key;
    Version version;
    std::set<std::string> holders;
    absl::Time deadline;
    absl::Time next_retry;
    bool acknowledged = false;  // reported; retries go on until every member holds it
  };

  std::optional<uint64_t> Write(absl::Time now, const std::string& key, const std::string& value,
                                bool deleted);
  // Applies `r` when newer; true when it changed the store.
  bool Apply(const StoreRecord& r);
  void SendDigests();
  bool HeldByMajority(const Pending& p) const;
  // Reports `p` acknowledged once a majority holds it; true when every member does.
  bool Settle(uint64_t id, Pending& p);

  std::string self_;
  StoreConfig config_;
  HybridClock clock_;
  std::vector<std::string> members_;
  std::map<std::string, StoreRecord> records_;
  std::map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
  absl::Time next_anti_entropy_ = absl::InfinitePast();
  std::vector<OutStoreMessage> out_;
  std::vector<StoreRecord> persist_;
  std::vector<uint64_t> acknowledged_;
  std::vector<uint64_t> failed_;
};

}  // namespace exa::scheduler
