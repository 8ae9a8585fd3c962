#include "scheduler/raft_spec_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/byte_io.h"
#include "common/logging.h"

namespace exa::scheduler {
namespace {

using consensus::Completion;
using consensus::KvCommand;
using consensus::KvOp;
using consensus::KvResult;
using consensus::Outcome;

// Frames between scheduler stores: a kind byte, then the kind's fields.
enum FrameKind : uint8_t {
  kRaft = 1,
  kHello = 2,
  kForward = 3,
  kResult = 4,
  kReadIndex = 5,        // a follower asks the leader for a read index
  kReadIndexResult = 6,  // the index, once the leader's barrier is applied
};

std::string IdFrame(FrameKind kind, uint64_t id, uint64_t index = 0) {
  ByteWriter w;
  w.U8(kind);
  w.U64(id);
  if (kind == kReadIndexResult) w.U64(index);
  return w.Take();
}

constexpr absl::Duration kHelloInterval = absl::Milliseconds(500);
// A peer's "empty" counts toward a bootstrap only this long: it may bootstrap or be added since.
constexpr absl::Duration kHelloFresh = absl::Seconds(1);  // two hello rounds
constexpr int kRaftVoter = 1;                             // RAFT_VOTER
constexpr int kRaftStandby = 0;                           // RAFT_STANDBY

// `bootstrap`: the member the sender expects to bootstrap (the lowest of its scheduler set).
std::string HelloFrame(bool has_log, bool reply, const std::string& bootstrap) {
  ByteWriter w;
  w.U8(kHello);
  w.U8(has_log ? 1 : 0);
  w.U8(reply ? 1 : 0);
  w.Bytes(bootstrap);
  return w.Take();
}

std::string ResultFrame(uint64_t id, const KvResult& r) {
  ByteWriter w;
  w.U8(kResult);
  w.U64(id);
  w.U8(r.ok ? 1 : 0);
  w.U64(r.index);
  w.Bytes(r.error);
  // A version conflict follows, only when there is one: a frame without it decodes as before.
  if (!r.conflict_key.empty()) {
    w.Bytes(r.conflict_key);
    w.U64(r.expected_version);
    w.U64(r.actual_version);
  }
  return w.Take();
}

std::optional<VersionConflict> ConflictOf(const KvResult& r) {
  if (r.ok || r.conflict_key.empty()) return std::nullopt;
  return VersionConflict{r.conflict_key, r.expected_version, r.actual_version};
}

}  // namespace

RaftSpecStore::RaftSpecStore(std::string self, consensus::LogStorage* storage,
                             RaftStoreConfig config)
    : self_(std::move(self)), storage_(storage), config_(std::move(config)), kv_(config_.limits) {
  config_.raft.self = self_;
}

RaftSpecStore::~RaftSpecStore() = default;

absl::Status RaftSpecStore::Open(absl::Time now) {
  absl::StatusOr<consensus::StoredState> state = storage_->Load();
  if (!state.ok()) return state.status();
  had_log_ = state->term != 0 || !state->entries.empty() || state->snapshot.has_value();
  if (had_log_) return StartRaft(now, false);
  return absl::OkStatus();
}

absl::Status RaftSpecStore::StartRaft(absl::Time now, bool bootstrap) {
  std::vector<std::string> voters;
  if (bootstrap) voters.push_back(self_);
  auto raft = consensus::RaftNode::Start(config_.raft, storage_, &kv_, now, voters);
  if (!raft.ok()) return raft.status();
  raft_ = std::move(*raft);
  had_log_ = true;
  EXA_LOG_INFO("scheduler",
               bootstrap ? "spec store: raft cluster bootstrapped" : "spec store: raft started",
               {{"node", self_}, {"term", static_cast<int64_t>(raft_->Term())}});
  return absl::OkStatus();
}

void RaftSpecStore::SetMembers(absl::Time now, std::vector<std::string> live,
                               std::vector<std::string> dead) {
  std::sort(live.begin(), live.end());
  live.erase(std::unique(live.begin(), live.end()), live.end());
  if (std::find(live.begin(), live.end(), self_) == live.end()) {
    live.insert(std::lower_bound(live.begin(), live.end(), self_), self_);
  }
  if (live != live_) {
    live_ = std::move(live);
    view_since_ = now;
  }
  dead_ = std::set<std::string>(dead.begin(), dead.end());
}

void RaftSpecStore::Send(const std::string& to, std::string bytes) {
  frames_.push_back({to, std::move(bytes)});
}

void RaftSpecStore::MaybeBootstrap(absl::Time now) {
  if (now >= next_hello_) {
    next_hello_ = now + kHelloInterval;
    for (const std::string& peer : live_) {
      if (peer != self_) Send(peer, HelloFrame(false, false, live_.front()));
    }
  }
  if (peer_has_log_ || live_.empty() || live_.front() != self_) return;
  if (now - view_since_ < config_.bootstrap_wait) return;
  for (const std::string& peer : live_) {
    if (peer == self_) continue;
    auto it = empty_peers_.find(peer);
    // Not heard from lately, or it sees another member as the lowest: not yet.
    if (it == empty_peers_.end() || now - it->second.said_at > kHelloFresh ||
        it->second.bootstrap != self_) {
      return;
    }
  }
  if (absl::Status s = StartRaft(now, true); !s.ok()) {
    EXA_LOG_ERROR("scheduler", "spec store: raft bootstrap failed",
                  {{"error", std::string(s.message())}});
  }
}

std::optional<uint64_t> RaftSpecStore::Put(absl::Time now, const std::string& key,
                                           const std::string& value,
                                           std::optional<uint64_t> expected_version) {
  return Write(now, {KvOp{key, value, expected_version}});
}

std::optional<uint64_t> RaftSpecStore::Delete(absl::Time now, const std::string& key,
                                              std::optional<uint64_t> expected_version) {
  return Write(now, {KvOp{key, std::nullopt, expected_version}});
}

std::optional<uint64_t> RaftSpecStore::Transact(absl::Time now, std::vector<KvOp> ops) {
  return Write(now, std::move(ops));
}

std::optional<uint64_t> RaftSpecStore::Write(absl::Time now, std::vector<KvOp> ops) {
  if (pending_.size() >= config_.max_pending_writes) return std::nullopt;
  uint64_t id = next_id_++;
  KvCommand command;
  // Unique across restarts of this node: the id counter restarts, the clock does not.
  command.request_id = absl::StrCat(self_, "/", absl::ToUnixMicros(now), "/", id);
  command.ops = std::move(ops);
  Pending& p = pending_[id];
  p.command = consensus::EncodeKvCommand(command);
  p.deadline = now + config_.forward_timeout;
  Submit(now, id, p);
  return id;
}

void RaftSpecStore::Submit(absl::Time now, uint64_t id, Pending& p) {
  if (raft_ != nullptr && raft_->IsLeader()) {
    absl::StatusOr<uint64_t> ticket = raft_->Propose(now, p.command);
    if (ticket.ok()) {
      p.ticket = *ticket;
      p.sent_to.clear();
      ticket_to_id_[*ticket] = id;
      return;
    }
    if (!absl::IsFailedPrecondition(ticket.status())) {
      Fail(id, std::string(ticket.status().message()));
      return;
    }
  }
  std::string leader = raft_ != nullptr ? raft_->Leader() : "";
  // Sent again to a new leader, or after a second without an answer (the leader answers a
  // request id it already applied with its first answer).
  if (leader.empty() || leader == self_) return;
  if (leader == p.sent_to && now - p.sent_at < absl::Seconds(1)) return;
  ByteWriter w;
  w.U8(kForward);
  w.U64(id);
  w.Bytes(p.command);
  Send(leader, w.Take());
  p.sent_to = leader;
  p.sent_at = now;
}

std::optional<uint64_t> RaftSpecStore::Read(absl::Time now, absl::Time deadline) {
  if (reads_.size() >= config_.max_pending_writes) return std::nullopt;
  uint64_t id = next_id_++;
  PendingRead& read = reads_[id];
  read.started = now;
  read.deadline = std::min(now + config_.forward_timeout, deadline);
  SubmitRead(now, id, read);
  return id;
}

void RaftSpecStore::SubmitRead(absl::Time now, uint64_t id, PendingRead& read) {
  if (read.ticket || read.wait_index != 0) return;
  if (raft_ != nullptr && raft_->IsLeader()) {
    absl::StatusOr<uint64_t> ticket = raft_->Barrier(now);
    if (ticket.ok()) {
      read.ticket = *ticket;
      ticket_to_read_[*ticket] = id;
    }
    return;
  }
  std::string leader = raft_ != nullptr ? raft_->Leader() : "";
  if (leader.empty() || leader == self_) return;
  if (leader == read.sent_to && now - read.sent_at < absl::Seconds(1)) return;
  Send(leader, IdFrame(kReadIndex, id));
  read.sent_to = leader;
  read.sent_at = now;
}

void RaftSpecStore::SettleReads(absl::Time now) {
  uint64_t applied = raft_ != nullptr ? raft_->LastApplied() : 0;
  for (auto it = applying_.begin(); it != applying_.end();) {
    auto [version, deadline] = it->second;
    if (applied < version && now < deadline) {
      ++it;
      continue;
    }
    outcomes_.push_back({it->first, true, version, ""});  // committed either way
    it = applying_.erase(it);
  }
  for (auto it = reads_.begin(); it != reads_.end();) {
    PendingRead& read = it->second;
    if (read.wait_index != 0 && applied >= read.wait_index) {
      outcomes_.push_back({it->first, true, read.wait_index, ""});
      it = reads_.erase(it);
    } else if (now >= read.deadline) {
      ticket_to_read_.erase(read.ticket.value_or(0));
      outcomes_.push_back(
          {it->first, false, 0,
           absl::StrCat("no read index from the raft leader within ",
                        absl::FormatDuration(read.deadline - read.started),
                        " (leader: ", Leader().empty() ? "none known" : Leader(), ")")});
      it = reads_.erase(it);
    } else {
      SubmitRead(now, it->first, read);
      ++it;
    }
  }
}

void RaftSpecStore::Fail(uint64_t id, std::string error, std::optional<VersionConflict> conflict) {
  if (pending_.erase(id) == 0) return;
  outcomes_.push_back({id, false, 0, std::move(error), std::move(conflict)});
}

void RaftSpecStore::Harvest() {
  if (raft_ == nullptr) return;
  for (const Completion& c : raft_->TakeCompletions()) {
    if (change_ticket_ == c.ticket) {
      change_ticket_.reset();
      continue;
    }
    if (auto r = ticket_to_read_.find(c.ticket); r != ticket_to_read_.end()) {
      auto read = reads_.find(r->second);
      if (read != reads_.end()) {
        read->second.ticket.reset();  // not applied: asked again
        if (c.outcome == Outcome::kApplied) read->second.wait_index = c.index;
      }
      ticket_to_read_.erase(r);
      continue;
    }
    if (auto f = ticket_to_remote_read_.find(c.ticket); f != ticket_to_remote_read_.end()) {
      if (c.outcome == Outcome::kApplied) {
        Send(f->second.from, IdFrame(kReadIndexResult, f->second.id, c.index));
      }
      ticket_to_remote_read_.erase(f);
      continue;
    }
    if (barrier_ticket_ == c.ticket) {
      barrier_ticket_.reset();
      if (c.outcome == Outcome::kApplied && raft_->IsLeader()) ready_term_ = raft_->Term();
      continue;
    }
    if (auto f = ticket_to_forward_.find(c.ticket); f != ticket_to_forward_.end()) {
      // Only an applied write is answered; otherwise the follower sends it to the next leader.
      if (c.outcome == Outcome::kApplied) {
        absl::StatusOr<KvResult> result = consensus::DecodeKvResult(c.result);
        if (result.ok()) Send(f->second.from, ResultFrame(f->second.id, *result));
      }
      ticket_to_forward_.erase(f);
      continue;
    }
    auto t = ticket_to_id_.find(c.ticket);
    if (t == ticket_to_id_.end()) continue;
    uint64_t id = t->second;
    ticket_to_id_.erase(t);
    auto p = pending_.find(id);
    if (p == pending_.end()) continue;
    if (c.outcome != Outcome::kApplied) {
      p->second.ticket.reset();  // proposed again (same request id: applied at most once)
      continue;
    }
    absl::StatusOr<KvResult> result = consensus::DecodeKvResult(c.result);
    if (!result.ok() || !result->ok) {
      if (result.ok()) {
        Fail(id, result->error, ConflictOf(*result));
      } else {
        Fail(id, std::string(result.status().message()));
      }
      continue;
    }
    pending_.erase(p);
    outcomes_.push_back({id, true, result->index, ""});
  }
}

void RaftSpecStore::ManageMembership(absl::Time now) {
  if (!ReadyToLead() || change_ticket_) return;
  std::map<std::string, int> roles;
  for (const consensus::RaftNode::Server& s : raft_->Configuration()) roles[s.node] = s.role;
  std::set<std::string> live(live_.begin(), live_.end());
  absl::StatusOr<uint64_t> ticket = absl::NotFoundError("");
  std::string what;
  size_t voters = 0;
  size_t ready = 0;  // live members that are not voters: who could be promoted
  for (const auto& [node, role] : roles) {
    voters += role == kRaftVoter;
    ready += role != kRaftVoter && live.count(node) > 0;
  }
  for (auto it = absent_since_.begin(); it != absent_since_.end();) {
    it = roles.count(it->first) == 0 || live.count(it->first) > 0 ? absent_since_.erase(it)
                                                                  : std::next(it);
  }
  for (const auto& [node, role] : roles) {
    if (node == self_) continue;
    if (live.count(node) == 0) absent_since_.emplace(node, now);
    bool absent = live.count(node) == 0 && now - absent_since_[node] >= config_.absent_grace;
    if (dead_.count(node) > 0 || absent) {
      ticket = raft_->RemoveServer(now, node);
      what = absl::StrCat("remove ", dead_.count(node) > 0 ? "dead " : "absent ", node);
      break;
    }
  }
  if (what.empty()) {
    for (const std::string& node : live_) {
      if (roles.count(node) == 0) {
        ticket = raft_->AddServer(now, node);
        what = absl::StrCat("add ", node);
        break;
      }
    }
  }
  // From an odd number of voters, promote only when a second member stands ready to follow: two
  // voters stall when either goes (a scheduler that lost the election stops answering), so an
  // even count should last one change, not until the next scheduler appears.
  const bool may_promote = voters < config_.max_voters && (voters % 2 == 0 || ready >= 2);
  if (what.empty()) {
    for (const auto& [node, role] : roles) {
      if (role == kRaftVoter || live.count(node) == 0) continue;
      if (may_promote) {
        ticket = raft_->AssignRole(now, node, kRaftVoter);
        what = absl::StrCat("promote ", node, " to voter");
        break;
      }
      if (role != kRaftStandby) {
        ticket = raft_->AssignRole(now, node, kRaftStandby);
        what = absl::StrCat("make ", node, " a standby");
        break;
      }
    }
  }
  if (what.empty()) return;
  if (!ticket.ok()) {
    EXA_LOG_WARN("scheduler", "spec store: raft membership change refused",
                 {{"change", what}, {"error", std::string(ticket.status().message())}});
    return;
  }
  change_ticket_ = *ticket;
  EXA_LOG_INFO("scheduler", "spec store: raft membership change", {{"change", what}});
}

void RaftSpecStore::Tick(absl::Time now) {
  if (raft_ == nullptr) {
    MaybeBootstrap(now);
  } else {
    raft_->Tick(now);
    Harvest();
    if (raft_->IsLeader() && ready_term_ != raft_->Term() && !barrier_ticket_) {
      absl::StatusOr<uint64_t> ticket = raft_->Barrier(now);
      if (ticket.ok()) barrier_ticket_ = *ticket;
    }
    ManageMembership(now);
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    const uint64_t id = it->first;
    Pending& p = it->second;
    ++it;  // Fail and Submit may erase `id`
    if (now >= p.deadline) {
      ticket_to_id_.erase(p.ticket.value_or(0));
      Fail(id, absl::StrCat("no outcome from the raft leader within ",
                            absl::FormatDuration(config_.forward_timeout),
                            " (leader: ", Leader().empty() ? "none known" : Leader(),
                            "); the write may still take effect"));
    } else if (!p.ticket) {
      Submit(now, id, p);
    }
  }
  Harvest();  // what the proposals above completed at once (a single voter commits inside them)
  SettleReads(now);
  if (raft_ != nullptr) {
    for (consensus::Outgoing& m : raft_->TakeMessages()) {
      std::string bytes(1, static_cast<char>(kRaft));
      bytes += m.bytes;
      Send(m.to, std::move(bytes));
    }
  }
}

absl::Status RaftSpecStore::Handle(absl::Time now, const std::string& from,
                                   std::string_view frame) {
  ByteReader r(frame);
  uint8_t kind = r.U8();
  if (!r.ok()) return absl::InvalidArgumentError("spec store frame: empty");
  switch (kind) {
    case kRaft: {
      if (raft_ == nullptr) {  // a leader added this node
        if (absl::Status s = StartRaft(now, false); !s.ok()) return s;
      }
      absl::Status s = raft_->Receive(now, r.Raw(r.remaining()));
      if (absl::IsFailedPrecondition(s)) {  // another cluster's leader: logged, not answered
        ++foreign_frames_;
        if (now - foreign_logged_at_ >= absl::Seconds(10)) {
          foreign_logged_at_ = now;
          EXA_LOG_ERROR("scheduler", "spec store: frames from another raft cluster dropped",
                        {{"from", from},
                         {"dropped", static_cast<int64_t>(foreign_frames_)},
                         {"error", std::string(s.message())}});
        }
        s = absl::OkStatus();
      }
      Tick(now);
      return s;
    }
    case kHello: {
      bool has_log = r.U8() != 0;
      bool reply = r.U8() != 0;
      // Absent from an older version's hello: then it names no one, and no one bootstraps on it.
      std::string bootstrap;
      if (r.remaining() > 0) bootstrap = r.Bytes(config_.raft.limits.max_address_bytes);
      if (!r.done()) return absl::InvalidArgumentError("spec store frame: bad hello");
      if (has_log)
        peer_has_log_ = true;
      else
        empty_peers_[from] = {now, std::move(bootstrap)};
      if (!reply) Send(from, HelloFrame(had_log_, true, live_.empty() ? self_ : live_.front()));
      return absl::OkStatus();
    }
    case kForward:
      return HandleForward(now, from, r);
    case kResult:
      return HandleResult(now, r);
    case kReadIndex: {
      uint64_t id = r.U64();
      if (!r.done()) return absl::InvalidArgumentError("spec store frame: bad read index");
      if (raft_ == nullptr || !raft_->IsLeader()) return absl::OkStatus();  // asked again
      absl::StatusOr<uint64_t> ticket = raft_->Barrier(now);
      if (ticket.ok()) ticket_to_remote_read_[*ticket] = {from, id};
      Tick(now);
      return absl::OkStatus();
    }
    case kReadIndexResult: {
      uint64_t id = r.U64();
      uint64_t index = r.U64();
      if (!r.done()) return absl::InvalidArgumentError("spec store frame: bad read index result");
      auto read = reads_.find(id);
      if (read != reads_.end() && read->second.wait_index == 0) read->second.wait_index = index;
      SettleReads(now);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("spec store frame: unknown kind ", kind));
  }
}

absl::Status RaftSpecStore::HandleForward(absl::Time now, const std::string& from, ByteReader& r) {
  uint64_t id = r.U64();
  std::string command(r.Bytes(config_.raft.max_command_bytes));
  if (!r.done()) return absl::InvalidArgumentError("spec store frame: bad forward");
  if (raft_ == nullptr || !raft_->IsLeader()) return absl::OkStatus();  // sent on elsewhere
  absl::StatusOr<uint64_t> ticket = raft_->Propose(now, command);
  if (ticket.ok()) {
    ticket_to_forward_[*ticket] = {from, id};
  } else if (!absl::IsFailedPrecondition(ticket.status())) {
    KvResult refused;
    refused.error = std::string(ticket.status().message());
    Send(from, ResultFrame(id, refused));
  }
  Tick(now);
  return absl::OkStatus();
}

absl::Status RaftSpecStore::HandleResult(absl::Time now, ByteReader& r) {
  uint64_t id = r.U64();
  bool ok = r.U8() != 0;
  uint64_t version = r.U64();
  std::string error(r.Bytes(1u << 16));
  std::optional<VersionConflict> conflict;
  if (r.ok() && r.remaining() > 0) {
    conflict = VersionConflict{std::string(r.Bytes(1u << 16)), r.U64(), r.U64()};
  }
  if (!r.done()) return absl::InvalidArgumentError("spec store frame: bad result");
  if (pending_.count(id) == 0) return absl::OkStatus();
  if (!ok) {
    Fail(id, std::move(error), std::move(conflict));
  } else {
    pending_.erase(id);
    applying_[id] = {version, now + config_.forward_timeout};
    SettleReads(now);
  }
  return absl::OkStatus();
}

std::vector<StoreFrame> RaftSpecStore::TakeFrames() { return std::exchange(frames_, {}); }
std::vector<WriteOutcome> RaftSpecStore::TakeOutcomes() { return std::exchange(outcomes_, {}); }

void RaftSpecStore::Refresh() {
  if (kv_.applied_index() == view_index_) return;
  view_index_ = kv_.applied_index();
  records_.clear();
  for (const auto& [key, record] : kv_.records()) {
    StoreRecord r;
    r.key = key;
    r.value = record.value;
    r.version = Version{Hlc{static_cast<int64_t>(record.version), 0}, "raft"};
    records_.emplace(key, std::move(r));
  }
}

const StoreRecord* RaftSpecStore::Get(const std::string& key) {
  Refresh();
  auto it = records_.find(key);
  return it == records_.end() ? nullptr : &it->second;
}

const std::map<std::string, StoreRecord>& RaftSpecStore::Records() {
  Refresh();
  return records_;
}

std::vector<StoreRecord> RaftSpecStore::Live() {
  Refresh();
  std::vector<StoreRecord> out;
  out.reserve(records_.size());
  for (const auto& [key, r] : records_) out.push_back(r);
  return out;
}

bool RaftSpecStore::IsLeader() const { return raft_ != nullptr && raft_->IsLeader(); }
bool RaftSpecStore::ReadyToLead() const { return IsLeader() && ready_term_ == raft_->Term(); }
std::string RaftSpecStore::Leader() const { return raft_ != nullptr ? raft_->Leader() : ""; }
uint64_t RaftSpecStore::Term() const { return raft_ != nullptr ? raft_->Term() : 0; }
uint64_t RaftSpecStore::AppliedIndex() const { return kv_.applied_index(); }

std::vector<consensus::RaftNode::Server> RaftSpecStore::Configuration() const {
  return raft_ != nullptr ? raft_->Configuration() : std::vector<consensus::RaftNode::Server>{};
}

int RaftSpecStore::Voters() const {
  int voters = 0;
  for (const consensus::RaftNode::Server& s : Configuration()) voters += s.role == kRaftVoter;
  return voters;
}

}  // namespace exa::scheduler
