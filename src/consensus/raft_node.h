// One Raft member, sans-IO (docs/architecture.md#consistency). It wraps libraft (canonical/raft,
// Debian's libraft-dev) with an I/O backend of our own instead of libraft's libuv one, so that
//   - the owner moves time: Tick(now) fires libraft's timers, nothing runs on a thread of its own;
//   - messages are bytes the owner carries (TakeMessages / Receive), over the cluster's gRPC and
//     its authentication in the daemon, over a simulated network in tests and the simulator;
//   - the log, term, vote and snapshot go to a LogStorage, durably before libraft hears back.
// A command is proposed on the leader and comes back as a Completion once applied (with the
// state machine's result), or as refused (never applied) or unknown (leadership was lost after
// it entered the log: it may still be applied, by the next leader). Barrier() completes once every
// entry before it is applied on this node while it is still leader: a read after it is
// linearizable.
//
// Thread safety: none; one owner calls every method (the scheduler's control thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "consensus/log_storage.h"
#include "consensus/raft_codec.h"

struct raft;
struct raft_io;
struct raft_fsm;
struct raft_tracer;

namespace exa::consensus {

struct RaftOptions {
  std::string self;  // this node's id, which is also its Raft address
  unsigned election_timeout_ms = 1000;
  unsigned heartbeat_timeout_ms = 100;
  // A snapshot sent to a lagging follower and not acknowledged by then is sent again (libraft's
  // default, 30 s, would leave a follower whose snapshot was lost behind for that long).
  unsigned install_snapshot_timeout_ms = 5000;
  unsigned snapshot_threshold = 1024;  // applied entries between snapshots
  unsigned snapshot_trailing = 256;    // entries kept behind a snapshot for lagging followers
  size_t max_in_flight = 1000;         // proposals, barriers and changes awaiting their outcome
  size_t max_command_bytes = 2u << 20;
  CodecLimits limits;
  uint64_t seed = 0;  // election jitter; 0: derived from `self`
};

// The replicated state machine: the same commands in the same order on every member.
class StateMachine {
 public:
  virtual ~StateMachine() = default;
  // Applies the command committed at `index`; what it returns goes back to the proposer.
  virtual std::string Apply(uint64_t index, std::string_view command) = 0;
  virtual std::string Snapshot() const = 0;
  virtual absl::Status Restore(std::string_view snapshot) = 0;
};

struct Outgoing {
  std::string to;  // node id
  std::string bytes;
};

enum class Outcome {
  kApplied,     // committed and applied
  kNotApplied,  // refused before it entered the log: never applied
  kUnknown,     // this node lost leadership after it entered the log: may yet be applied
};

struct Completion {
  uint64_t ticket = 0;
  Outcome outcome = Outcome::kApplied;
  uint64_t index = 0;  // where it was applied (kApplied)
  std::string result;  // StateMachine::Apply's answer (kApplied commands)
  std::string error;   // why not (otherwise)
};

// The Raft server id of a node id (a stable 64-bit hash, never 0).
uint64_t RaftIdOf(std::string_view node);

class RaftNode {
 public:
  // Loads `storage` (a fresh one with `bootstrap_voters` not empty is first bootstrapped with
  // them as the initial configuration; every bootstrapping member must name the same set) and
  // starts. `storage` and `fsm` must outlive the node.
  static absl::StatusOr<std::unique_ptr<RaftNode>> Start(
      RaftOptions options, LogStorage* storage, StateMachine* fsm, absl::Time now,
      const std::vector<std::string>& bootstrap_voters);
  ~RaftNode();
  RaftNode(const RaftNode&) = delete;
  RaftNode& operator=(const RaftNode&) = delete;

  void Tick(absl::Time now);
  absl::Time NextTick() const;
  // A message from a peer; INVALID_ARGUMENT when it does not decode, FAILED_PRECONDITION when
  // it claims to lead the term this node leads (nothing else happens either way).
  absl::Status Receive(absl::Time now, std::string_view bytes);

  // A ticket for the outcome, or FAILED_PRECONDITION (not the leader: names the leader when
  // known), RESOURCE_EXHAUSTED (too many in flight), INVALID_ARGUMENT (command too large).
  absl::StatusOr<uint64_t> Propose(absl::Time now, std::string_view command);
  absl::StatusOr<uint64_t> Barrier(absl::Time now);
  // Configuration changes, one at a time, on the leader: add as a spare, then AssignRole.
  absl::StatusOr<uint64_t> AddServer(absl::Time now, const std::string& node);
  absl::StatusOr<uint64_t> AssignRole(absl::Time now, const std::string& node, int role);
  absl::StatusOr<uint64_t> RemoveServer(absl::Time now, const std::string& node);

  std::vector<Outgoing> TakeMessages();
  std::vector<Completion> TakeCompletions();

  bool IsLeader() const;
  std::string Leader() const;  // empty while unknown
  uint64_t Term() const;
  uint64_t LastApplied() const;
  uint64_t CommitIndex() const;
  struct Server {
    std::string node;
    int role = 0;
    bool operator==(const Server&) const = default;
  };
  std::vector<Server> Configuration() const;
  size_t in_flight() const { return requests_.size(); }

 private:
  struct Request;
  struct IoGlue;

  explicit RaftNode(RaftOptions options, LogStorage* storage, StateMachine* fsm);
  absl::Status Init(absl::Time now, const std::vector<std::string>& bootstrap_voters);
  // Points libraft at our raft_io and raft_fsm implementations (IoGlue).
  void InstallBackends();
  // Runs the I/O completions queued by libraft's calls, and any they queue in turn.
  void DrainIo();
  // DrainIo, then learns the addresses of the servers in the configuration.
  void Flush();
  absl::Status CanRequest() const;
  // FAILED_PRECONDITION for a message from another leader of the term this node leads.
  absl::Status CheckSingleLeader(const raft_message& m, const std::string& from) const;
  Request* NewRequest();
  void Complete(Request* request, Outcome outcome, std::string error);
  absl::StatusOr<uint64_t> StartChange(int code, std::string_view what, const std::string& node,
                                       int role);

  RaftOptions options_;
  LogStorage* storage_;
  StateMachine* fsm_;
  std::unique_ptr<raft> raft_;
  std::unique_ptr<raft_io> io_;
  std::unique_ptr<raft_fsm> raft_fsm_;
  std::unique_ptr<IoGlue> glue_;
  std::unique_ptr<raft_tracer> tracer_;  // EXASERVE_RAFT_TRACE set: libraft's trace to stderr
  std::map<Request*, std::unique_ptr<Request>> requests_;
  std::map<uint64_t, Request*> proposals_by_index_;
  std::map<uint64_t, std::string> addresses_;  // raft id → node id, for outgoing messages
  std::vector<Outgoing> out_;
  std::vector<Completion> completions_;
  uint64_t next_ticket_ = 1;
  bool started_ = false;
};

}  // namespace exa::consensus
