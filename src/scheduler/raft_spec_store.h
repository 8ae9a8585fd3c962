// The spec store on Raft (docs/architecture.md#consistency), sans-IO: a consensus::RaftNode over
// a consensus::KvState on every scheduler node, with what the scheduler needs around it.
//   - Writes: Put / Delete on any scheduler. The leader proposes them; a follower forwards them
//     to the leader it knows (a "forward" frame) and hears the outcome back. Each write carries a
//     request id, so a forward that reaches a new leader twice is applied once. A write is
//     acknowledged once committed and applied; it fails when refused (no leader known, a stale
//     expected version, the store's limits) or when no outcome arrives within forward_timeout
//     (then it may still take effect: the error says so).
//   - Reads: Get / Live answer from this node's applied state, versions being Raft indexes. For a
//     linearizable read, Read() first: its outcome comes once this node has applied everything
//     committed when the read began (the leader commits a barrier; a follower asks the leader for
//     that barrier's index and waits until it has applied as far).
//   - Bootstrap: a node with an empty log starts no Raft until either the leader of an existing
//     cluster contacts it (it was added) or it bootstraps one: it is the lowest id of the
//     scheduler set, that set has been stable for bootstrap_wait, and every other member of it
//     answered a "hello" within the last second saying its log is empty too and that it takes
//     this node for the lowest as well (so two nodes whose views differ do not both bootstrap).
//     The cluster starts with that one voter; the leader adds the rest.
//   - Membership: the leader keeps up to max_voters live schedulers as voters and the others as
//     standbys (they replicate, they do not vote), adds schedulers it does not know, promotes a
//     standby when a voter is gone, and removes a member that is dead or has been out of the
//     live scheduler set for absent_grace; one change at a time. From an odd number of voters it
//     promotes only when two members stand ready, so an even count lasts one change.
//   - Leading: ReadyToLead() once this node leads and has applied a barrier of its own term, so
//     its state holds every write acknowledged before (the reconciler acts only then).
//
// Driving it: SetMembers / Put / Delete / Handle / Tick with `now`, then send TakeFrames() and
// report TakeOutcomes() to the clients. Thread safety: none; one owner calls every method.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/byte_io.h"
#include "consensus/kv_state.h"
#include "consensus/log_storage.h"
#include "consensus/raft_node.h"
#include "scheduler/replicated_store.h"

namespace exa::scheduler {

struct RaftStoreConfig {
  absl::Duration bootstrap_wait = absl::Seconds(2);
  absl::Duration forward_timeout = absl::Seconds(5);
  size_t max_voters = 5;
  // A member out of the live scheduler set this long (it lost the role, or stopped answering
  // without being declared dead) leaves the configuration, so it cannot hold a quorum hostage.
  absl::Duration absent_grace = absl::Seconds(30);
  size_t max_pending_writes = 1000;
  consensus::KvLimits limits;
  consensus::RaftOptions raft;  // `self` is set from the store's node id
};

struct StoreFrame {
  std::string to;
  std::string bytes;
};

// A write refused because it named a version the store no longer holds for `key`.
struct VersionConflict {
  std::string key;
  uint64_t expected_version = 0;  // what the write named (0: "must not exist")
  uint64_t actual_version = 0;    // what the store holds (0: absent)
  bool operator==(const VersionConflict&) const = default;
};

struct WriteOutcome {
  uint64_t id = 0;
  bool ok = false;
  uint64_t version = 0;  // the Raft index it was applied at (ok)
  std::string error;     // why not
  // Set when refused for a stale expected version (the caller may read again and retry); other
  // refusals (no leader, limits, no outcome in time) leave it empty.
  std::optional<VersionConflict> conflict;
};

class RaftSpecStore {
 public:
  RaftSpecStore(std::string self, consensus::LogStorage* storage, RaftStoreConfig config = {});
  ~RaftSpecStore();

  // Starts Raft at once when the storage holds a log (a restart).
  absl::Status Open(absl::Time now);

  // The scheduler nodes in view: live ones, and those known dead (voters among them are removed).
  void SetMembers(absl::Time now, std::vector<std::string> live, std::vector<std::string> dead);

  // A write's id (its outcome comes from TakeOutcomes), or nullopt when refused at once (too
  // many writes in flight). `expected_version`: the version the writer read (0: absent).
  std::optional<uint64_t> Put(absl::Time now, const std::string& key, const std::string& value,
                              std::optional<uint64_t> expected_version = std::nullopt);
  std::optional<uint64_t> Delete(absl::Time now, const std::string& key,
                                 std::optional<uint64_t> expected_version = std::nullopt);
  // Several puts and deletes as one write: applied all or none (one stale expected version
  // refuses them all). Same id space and limits as Put.
  std::optional<uint64_t> Transact(absl::Time now, std::vector<consensus::KvOp> ops);

  // A read index: the outcome (same id space as writes) is ok once Get / Live reflect every write
  // acknowledged before this call; nullopt when too many are in flight. It fails at
  // forward_timeout, or at `deadline` when that comes first (the caller's own deadline, less a
  // margin, so the caller hears why rather than only that time ran out).
  std::optional<uint64_t> Read(absl::Time now, absl::Time deadline = absl::InfiniteFuture());

  // A frame from scheduler `from`; INVALID_ARGUMENT when it does not decode.
  absl::Status Handle(absl::Time now, const std::string& from, std::string_view frame);
  void Tick(absl::Time now);

  std::vector<StoreFrame> TakeFrames();
  std::vector<WriteOutcome> TakeOutcomes();

  // The record for `key` as applied here (versions: the writing Raft index).
  const StoreRecord* Get(const std::string& key);
  std::vector<StoreRecord> Live();
  // Every record as applied here, by key; valid until the next call that changes the store.
  const std::map<std::string, StoreRecord>& Records();

  bool started() const { return raft_ != nullptr; }
  bool IsLeader() const;
  bool ReadyToLead() const;
  std::string Leader() const;  // empty while unknown
  uint64_t Term() const;
  uint64_t AppliedIndex() const;
  std::vector<consensus::RaftNode::Server> Configuration() const;
  int Voters() const;  // voters in the current configuration (0 before Raft starts)

 private:
  struct Forwarded {  // a follower's write the leader proposed for it
    std::string from;
    uint64_t id = 0;
  };
  struct Pending {
    std::string command;  // kept to re-send to a new leader
    absl::Time deadline;
    std::optional<uint64_t> ticket;  // proposed here
    std::string sent_to;             // forwarded there
    absl::Time sent_at;
  };

  struct PendingRead {
    absl::Time started;
    absl::Time deadline;
    std::optional<uint64_t> ticket;  // the barrier, on the leader
    std::string sent_to;             // asked of the leader
    absl::Time sent_at;
    uint64_t wait_index = 0;  // answered: wait until applied this far
  };

  absl::Status StartRaft(absl::Time now, bool bootstrap);
  void SubmitRead(absl::Time now, uint64_t id, PendingRead& read);
  // A follower's write to propose (on the leader), and the leader's answer (on the follower).
  absl::Status HandleForward(absl::Time now, const std::string& from, ByteReader& r);
  absl::Status HandleResult(absl::Time now, ByteReader& r);
  void SettleReads(absl::Time now);
  void MaybeBootstrap(absl::Time now);
  void ManageMembership(absl::Time now);
  std::optional<uint64_t> Write(absl::Time now, std::vector<consensus::KvOp> ops);
  void Submit(absl::Time now, uint64_t id, Pending& pending);
  void Harvest();
  void Fail(uint64_t id, std::string error, std::optional<VersionConflict> conflict = {});
  void Send(const std::string& to, std::string bytes);
  void Refresh();

  std::string self_;
  consensus::LogStorage* storage_;
  RaftStoreConfig config_;
  consensus::KvState kv_;
  std::unique_ptr<consensus::RaftNode> raft_;
  bool had_log_ = false;

  std::vector<std::string> live_;
  std::set<std::string> dead_;
  std::map<std::string, absl::Time> absent_since_;  // configuration members not in `live_`
  absl::Time view_since_ = absl::InfinitePast();    // the scheduler set is unchanged since
  struct EmptyPeer {
    absl::Time said_at;     // when its last hello or answer came
    std::string bootstrap;  // the member it expects to bootstrap: the lowest of its view
  };
  std::map<std::string, EmptyPeer> empty_peers_;  // peers whose last hello said: empty log
  bool peer_has_log_ = false;
  uint64_t foreign_frames_ = 0;  // from a leader of this node's own term: another cluster
  absl::Time foreign_logged_at_ = absl::InfinitePast();
  absl::Time next_hello_ = absl::InfinitePast();

  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending> pending_;              // this node's writes
  std::map<uint64_t, uint64_t> ticket_to_id_;        // proposals of this node's writes
  std::map<uint64_t, Forwarded> ticket_to_forward_;  // proposals made for followers
  std::map<uint64_t, PendingRead> reads_;
  std::map<uint64_t, uint64_t> ticket_to_read_;          // barriers of this node's reads
  std::map<uint64_t, Forwarded> ticket_to_remote_read_;  // barriers made for followers' reads
  // Writes the leader acknowledged, reported once applied here too (read-your-writes on this
  // node) or after forward_timeout: id → (version, deadline).
  std::map<uint64_t, std::pair<uint64_t, absl::Time>> applying_;
  std::optional<uint64_t> change_ticket_;  // the membership change in flight
  std::optional<uint64_t> barrier_ticket_;
  uint64_t ready_term_ = 0;  // the term whose barrier was applied here while leading

  std::vector<StoreFrame> frames_;
  std::vector<WriteOutcome> outcomes_;
  uint64_t view_index_ = ~0ull;  // the applied index `records_` reflects
  std::map<std::string, StoreRecord> records_;
};

}  // namespace exa::scheduler
