#include "consensus/raft_node.h"

#include "consensus/raft_c.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"

namespace exa::consensus {

// libraft's request structs must stay put until their callback; one of these per request.
struct RaftNode::Request {
  RaftNode* node = nullptr;
  uint64_t ticket = 0;
  uint64_t index = 0;
  std::string result;
  struct raft_apply apply {};
  struct raft_barrier barrier {};
  struct raft_change change {};
};

namespace {

uint64_t ToMs(absl::Time t) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(t)));
}

int IoError(raft_io* io, const absl::Status& s) {
  std::snprintf(io->errmsg, RAFT_ERRMSG_BUF_SIZE, "%s", std::string(s.message()).c_str());
  return RAFT_IOERR;
}

// Copies `s` into libraft's allocation: one buffer, the configuration rebuilt.
raft_snapshot* ToRaftSnapshot(const StoredSnapshot& s) {
  auto* out = static_cast<raft_snapshot*>(raft_calloc(1, sizeof(raft_snapshot)));
  out->index = s.index;
  out->term = s.term;
  raft_configuration_init(&out->configuration);
  for (const StoredServer& server : s.configuration) {
    raft_configuration_add(&out->configuration, server.id, server.address.c_str(), server.role);
  }
  out->configuration_index = s.configuration_index;
  out->bufs = static_cast<raft_buffer*>(raft_calloc(1, sizeof(raft_buffer)));
  out->n_bufs = 1;
  out->bufs[0].len = s.data.size();
  out->bufs[0].base = raft_malloc(s.data.size() > 0 ? s.data.size() : 1);
  if (!s.data.empty()) std::memcpy(out->bufs[0].base, s.data.data(), s.data.size());
  return out;
}

StoredSnapshot FromRaftSnapshot(const raft_snapshot& s) {
  StoredSnapshot out;
  out.index = s.index;
  out.term = s.term;
  for (unsigned i = 0; i < s.configuration.n; ++i) {
    const raft_server& server = s.configuration.servers[i];
    out.configuration.push_back({server.id, server.address, server.role});
  }
  out.configuration_index = s.configuration_index;
  for (unsigned i = 0; i < s.n_bufs; ++i) {
    out.data.append(static_cast<const char*>(s.bufs[i].base), s.bufs[i].len);
  }
  return out;
}

// Entries in one raft_malloc'd batch, as libraft's load contract wants them.
raft_entry* ToRaftEntries(const std::vector<StoredEntry>& entries) {
  if (entries.empty()) return nullptr;
  size_t total = 0;
  for (const StoredEntry& e : entries) total += e.data.size();
  auto* out = static_cast<raft_entry*>(raft_calloc(entries.size(), sizeof(raft_entry)));
  char* batch = static_cast<char*>(raft_malloc(total > 0 ? total : 1));
  size_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    out[i].term = entries[i].term;
    out[i].type = entries[i].type;
    out[i].batch = batch;
    out[i].buf.len = entries[i].data.size();
    out[i].buf.base = entries[i].data.empty() ? nullptr : batch + offset;
    if (!entries[i].data.empty())
      std::memcpy(batch + offset, entries[i].data.data(), entries[i].data.size());
    offset += entries[i].data.size();
  }
  return out;
}

}  // namespace

uint64_t RaftIdOf(std::string_view node) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : node) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

// The raft_io backend and the raft_fsm adapter: time, timers, storage, and the completions
// libraft expects to hear about after (never inside) the call that started them.
struct RaftNode::IoGlue {
  RaftNode* node = nullptr;
  uint64_t now_ms = 0;
  unsigned tick_ms = 0;
  uint64_t next_tick_ms = 0;
  raft_io_tick_cb tick_cb = nullptr;
  raft_io_recv_cb recv_cb = nullptr;
  std::deque<std::function<void()>> pending;
  uint64_t next_index = 1;  // where the next appended entry goes
  uint64_t term = 0;        // as stored
  std::optional<StoredSnapshot> snapshot;
  std::mt19937_64 rng;

  static IoGlue* Of(raft_io* io) { return static_cast<IoGlue*>(io->impl); }
  static LogStorage* StorageOf(raft_io* io) { return Of(io)->node->storage_; }

  static int Init(raft_io*, raft_id, const char*) { return 0; }

  static void Close(raft_io* io, raft_io_close_cb cb) {
    Of(io)->pending.push_back([io, cb] {
      if (cb != nullptr) cb(io);
    });
  }

  static int Load(raft_io* io, raft_term* term, raft_id* voted_for, raft_snapshot** snapshot,
                  raft_index* start_index, raft_entry** entries, size_t* n_entries) {
    absl::StatusOr<StoredState> state = StorageOf(io)->Load();
    if (!state.ok()) return IoError(io, state.status());
    *term = state->term;
    Of(io)->term = state->term;
    *voted_for = state->voted_for;
    *snapshot = state->snapshot ? ToRaftSnapshot(*state->snapshot) : nullptr;
    *start_index = state->first_index;
    *entries = ToRaftEntries(state->entries);
    *n_entries = state->entries.size();
    Of(io)->next_index = state->first_index + state->entries.size();
    Of(io)->snapshot = std::move(state->snapshot);
    return 0;
  }

  static int Start(raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
    IoGlue* glue = Of(io);
    glue->tick_ms = msecs;
    glue->tick_cb = tick;
    glue->recv_cb = recv;
    glue->next_tick_ms = glue->now_ms + msecs;
    return 0;
  }

  static int Bootstrap(raft_io* io, const raft_configuration* conf) {
    absl::StatusOr<StoredState> state = StorageOf(io)->Load();
    if (!state.ok()) return IoError(io, state.status());
    if (state->term != 0 || !state->entries.empty() || state->snapshot) return RAFT_CANTBOOTSTRAP;
    raft_buffer buf{};
    if (int rv = raft_configuration_encode(conf, &buf); rv != 0) return rv;
    StoredEntry entry{1, RAFT_CHANGE, std::string(static_cast<const char*>(buf.base), buf.len)};
    raft_free(buf.base);
    if (absl::Status s = StorageOf(io)->Append(1, {entry}); !s.ok()) return IoError(io, s);
    if (absl::Status s = StorageOf(io)->SetTermVote(1, 0); !s.ok()) return IoError(io, s);
    Of(io)->next_index = 2;
    Of(io)->term = 1;
    return 0;
  }

  static int Recover(raft_io*, const raft_configuration*) { return RAFT_IOERR; }

  static int SetTerm(raft_io* io, raft_term term) {
    absl::Status s = StorageOf(io)->SetTermVote(term, 0);
    if (!s.ok()) return IoError(io, s);
    Of(io)->term = term;
    return 0;
  }

  static int SetVote(raft_io* io, raft_id server) {
    absl::Status s = StorageOf(io)->SetTermVote(Of(io)->term, server);
    return s.ok() ? 0 : IoError(io, s);
  }

  static int Send(raft_io* io, raft_io_send* req, const raft_message* message, raft_io_send_cb cb) {
    RaftNode* node = Of(io)->node;
    std::string to = message->server_address != nullptr ? message->server_address : "";
    if (to.empty()) {
      auto it = node->addresses_.find(message->server_id);
      if (it != node->addresses_.end()) to = it->second;
    }
    int status = RAFT_NOCONNECTION;
    if (!to.empty()) {
      node->out_.push_back(
          {to, EncodeMessage(RaftIdOf(node->options_.self), node->options_.self, *message)});
      status = 0;
    }
    req->cb = cb;
    Of(io)->pending.push_back([req, status] {
      if (req->cb != nullptr) req->cb(req, status);
    });
    return 0;
  }

  static int Append(raft_io* io, raft_io_append* req, const raft_entry entries[], unsigned n,
                    raft_io_append_cb cb) {
    std::vector<StoredEntry> stored;
    stored.reserve(n);
    for (unsigned i = 0; i < n; ++i) {
      stored.push_back(
          {entries[i].term, entries[i].type,
           std::string(static_cast<const char*>(entries[i].buf.base), entries[i].buf.len)});
    }
    absl::Status s = StorageOf(io)->Append(Of(io)->next_index, stored);
    if (!s.ok()) return IoError(io, s);
    Of(io)->next_index += n;
    req->cb = cb;
    Of(io)->pending.push_back([req] {
      if (req->cb != nullptr) req->cb(req, 0);
    });
    return 0;
  }

  static int Truncate(raft_io* io, raft_index index) {
    absl::Status s = StorageOf(io)->TruncateFrom(index);
    if (!s.ok()) return IoError(io, s);
    Of(io)->next_index = index;
    return 0;
  }

  static int SnapshotPut(raft_io* io, unsigned trailing, raft_io_snapshot_put* req,
                         const raft_snapshot* snapshot, raft_io_snapshot_put_cb cb) {
    StoredSnapshot stored = FromRaftSnapshot(*snapshot);
    absl::Status s = StorageOf(io)->PutSnapshot(stored, trailing);
    if (!s.ok()) return IoError(io, s);
    if (trailing == 0) Of(io)->next_index = stored.index + 1;
    Of(io)->snapshot = std::move(stored);
    req->cb = cb;
    Of(io)->pending.push_back([req] {
      if (req->cb != nullptr) req->cb(req, 0);
    });
    return 0;
  }

  static int SnapshotGet(raft_io* io, raft_io_snapshot_get* req, raft_io_snapshot_get_cb cb) {
    IoGlue* glue = Of(io);
    if (!glue->snapshot) return RAFT_NOTFOUND;
    raft_snapshot* copy = ToRaftSnapshot(*glue->snapshot);
    req->cb = cb;
    glue->pending.push_back([req, copy] { req->cb(req, copy, 0); });
    return 0;
  }

  static raft_time Time(raft_io* io) { return Of(io)->now_ms; }

  static int Random(raft_io* io, int min, int max) {
    if (max <= min) return min;
    return min + static_cast<int>(Of(io)->rng() % static_cast<uint64_t>(max - min));
  }

  // raft_fsm, version 1.
  static int FsmApply(raft_fsm* fsm, const raft_buffer* buf, void** result) {
    RaftNode* node = static_cast<RaftNode*>(fsm->data);
    uint64_t index = raft_last_applied(node->raft_.get()) + 1;
    std::string out =
        node->fsm_->Apply(index, std::string_view(static_cast<const char*>(buf->base), buf->len));
    auto it = node->proposals_by_index_.find(index);
    if (it != node->proposals_by_index_.end()) it->second->result = std::move(out);
    *result = nullptr;
    return 0;
  }

  static int FsmSnapshot(raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs) {
    RaftNode* node = static_cast<RaftNode*>(fsm->data);
    std::string data = node->fsm_->Snapshot();
    *bufs = static_cast<raft_buffer*>(raft_calloc(1, sizeof(raft_buffer)));
    (*bufs)[0].len = data.size();
    (*bufs)[0].base = raft_malloc(data.size() > 0 ? data.size() : 1);
    if (!data.empty()) std::memcpy((*bufs)[0].base, data.data(), data.size());
    *n_bufs = 1;
    return 0;
  }

  static int FsmRestore(raft_fsm* fsm, raft_buffer* buf) {
    RaftNode* node = static_cast<RaftNode*>(fsm->data);
    absl::Status s =
        node->fsm_->Restore(std::string_view(static_cast<const char*>(buf->base), buf->len));
    if (!s.ok()) return RAFT_CORRUPT;
    raft_free(buf->base);
    return 0;
  }
};

RaftNode::RaftNode(RaftOptions options, LogStorage* storage, StateMachine* fsm)
    : options_(std::move(options)),
      storage_(storage),
      fsm_(fsm),
      raft_(std::make_unique<raft>()),
      io_(std::make_unique<raft_io>()),
      raft_fsm_(std::make_unique<raft_fsm>()),
      glue_(std::make_unique<IoGlue>()) {}

absl::StatusOr<std::unique_ptr<RaftNode>> RaftNode::Start(
    RaftOptions options, LogStorage* storage, StateMachine* fsm, absl::Time now,
    const std::vector<std::string>& bootstrap_voters) {
  if (options.self.empty() || options.self.size() > options.limits.max_address_bytes) {
    return absl::InvalidArgumentError("raft: the node id must be 1 to 255 bytes");
  }
  if (options.heartbeat_timeout_ms == 0 ||
      options.heartbeat_timeout_ms >= options.election_timeout_ms) {
    return absl::InvalidArgumentError(
        "raft: the heartbeat timeout must be below the election timeout");
  }
  std::unique_ptr<RaftNode> node(new RaftNode(std::move(options), storage, fsm));
  if (absl::Status s = node->Init(now, bootstrap_voters); !s.ok()) return s;
  return node;
}

void RaftNode::InstallBackends() {
  std::memset(io_.get(), 0, sizeof(raft_io));
  io_->version = 1;
  io_->impl = glue_.get();
  io_->init = IoGlue::Init;
  io_->close = IoGlue::Close;
  io_->load = IoGlue::Load;
  io_->start = IoGlue::Start;
  io_->bootstrap = IoGlue::Bootstrap;
  io_->recover = IoGlue::Recover;
  io_->set_term = IoGlue::SetTerm;
  io_->set_vote = IoGlue::SetVote;
  io_->send = IoGlue::Send;
  io_->append = IoGlue::Append;
  io_->truncate = IoGlue::Truncate;
  io_->snapshot_put = IoGlue::SnapshotPut;
  io_->snapshot_get = IoGlue::SnapshotGet;
  io_->time = IoGlue::Time;
  io_->random = IoGlue::Random;
  std::memset(raft_fsm_.get(), 0, sizeof(raft_fsm));
  raft_fsm_->version = 1;
  raft_fsm_->data = this;
  raft_fsm_->apply = IoGlue::FsmApply;
  raft_fsm_->snapshot = IoGlue::FsmSnapshot;
  raft_fsm_->restore = IoGlue::FsmRestore;
}

absl::Status RaftNode::Init(absl::Time now, const std::vector<std::string>& bootstrap_voters) {
  glue_->node = this;
  glue_->now_ms = ToMs(now);
  glue_->rng.seed(options_.seed != 0 ? options_.seed : RaftIdOf(options_.self));
  InstallBackends();

  uint64_t id = RaftIdOf(options_.self);
  if (int rv = raft_init(raft_.get(), io_.get(), raft_fsm_.get(), id, options_.self.c_str());
      rv != 0) {
    return absl::InternalError(absl::StrCat("raft_init: ", raft_strerror(rv)));
  }
  started_ = true;  // from here on the destructor must raft_close
  if (std::getenv("EXASERVE_RAFT_TRACE") != nullptr) {  // libraft's own trace, per node, to stderr
    tracer_ = std::make_unique<raft_tracer>();
    tracer_->impl = this;
    tracer_->enabled = true;
    tracer_->emit = [](raft_tracer* t, const char* file, int line, const char* message) {
      auto* node = static_cast<RaftNode*>(t->impl);
      std::fprintf(stderr, "raft %s t=%llu %s:%d %s\n", node->options_.self.c_str(),
                   static_cast<unsigned long long>(node->glue_->now_ms % 100000), file, line,
                   message);
    };
    raft_->tracer = tracer_.get();
  }
  raft_set_election_timeout(raft_.get(), options_.election_timeout_ms);
  raft_set_heartbeat_timeout(raft_.get(), options_.heartbeat_timeout_ms);
  raft_set_install_snapshot_timeout(raft_.get(), options_.install_snapshot_timeout_ms);
  raft_set_snapshot_threshold(raft_.get(), options_.snapshot_threshold);
  raft_set_snapshot_trailing(raft_.get(), options_.snapshot_trailing);
  raft_set_pre_vote(raft_.get(), true);  // a partitioned node rejoining does not depose the leader

  if (!bootstrap_voters.empty()) {
    raft_configuration conf;
    raft_configuration_init(&conf);
    for (const std::string& v :
         std::set<std::string>(bootstrap_voters.begin(), bootstrap_voters.end())) {
      raft_configuration_add(&conf, RaftIdOf(v), v.c_str(), RAFT_VOTER);
    }
    int rv = raft_bootstrap(raft_.get(), &conf);
    raft_configuration_close(&conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {
      return absl::InternalError(
          absl::StrCat("raft bootstrap: ", raft_strerror(rv), ": ", raft_errmsg(raft_.get())));
    }
  }
  if (int rv = raft_start(raft_.get()); rv != 0) {
    return absl::InternalError(
        absl::StrCat("raft start: ", raft_strerror(rv), ": ", raft_errmsg(raft_.get())));
  }
  Flush();
  return absl::OkStatus();
}

RaftNode::~RaftNode() {
  if (!started_) return;
  Flush();
  bool closed = false;
  raft_->data = &closed;
  raft_close(raft_.get(), [](struct raft* r) { *static_cast<bool*>(r->data) = true; });
  DrainIo();
  // Requests libraft did not call back (it is closed now and will not touch them).
  requests_.clear();
}

void RaftNode::DrainIo() {
  while (!glue_->pending.empty()) {
    std::function<void()> next = std::move(glue_->pending.front());
    glue_->pending.pop_front();
    next();
  }
}

void RaftNode::Flush() {
  DrainIo();
  for (const raft_server* s = raft_->configuration.servers;
       s != nullptr && s < raft_->configuration.servers + raft_->configuration.n; ++s) {
    if (s->address != nullptr) addresses_.emplace(s->id, s->address);
  }
}

void RaftNode::Tick(absl::Time now) {
  uint64_t ms = ToMs(now);
  if (ms > glue_->now_ms) glue_->now_ms = ms;
  if (glue_->tick_cb == nullptr) return;
  // Far behind (a paused process): one tick, not a burst of them.
  if (glue_->now_ms > glue_->next_tick_ms + 10ull * glue_->tick_ms)
    glue_->next_tick_ms = glue_->now_ms;
  while (glue_->now_ms >= glue_->next_tick_ms) {
    glue_->next_tick_ms += glue_->tick_ms;
    glue_->tick_cb(io_.get());
    Flush();
  }
}

absl::Time RaftNode::NextTick() const {
  return absl::FromUnixMillis(static_cast<int64_t>(glue_->next_tick_ms));
}

absl::Status RaftNode::Receive(absl::Time now, std::string_view bytes) {
  uint64_t ms = ToMs(now);
  if (ms > glue_->now_ms) glue_->now_ms = ms;
  raft_message message;
  std::string from;
  if (absl::Status s = DecodeMessage(bytes, options_.limits, &message, &from); !s.ok()) return s;
  if (glue_->recv_cb == nullptr) {
    FreeDecoded(&message);
    return absl::OkStatus();
  }
  if (absl::Status s = CheckSingleLeader(message, from); !s.ok()) {
    FreeDecoded(&message);
    return s;
  }
  addresses_.emplace(message.server_id, from);
  glue_->recv_cb(io_.get(), &message);  // takes the decoded entries and snapshot data
  Flush();
  return absl::OkStatus();
}

// At most one leader per term is what Raft guarantees within one cluster, and libraft relies on
// it without a check (its asserts are compiled out): a leader handed an AppendEntries or
// InstallSnapshot of its own term records the sender as its leader in the memory that holds its
// own leader state, and later calls through what is now garbage. Two leaders of one term means
// two clusters (islands that each bootstrapped, docs/architecture.md#consistency), so such a
// message is refused here, before libraft sees it.
absl::Status RaftNode::CheckSingleLeader(const raft_message& m, const std::string& from) const {
  if (raft_state(raft_.get()) != RAFT_LEADER) return absl::OkStatus();
  raft_term term = m.type == RAFT_IO_APPEND_ENTRIES     ? m.append_entries.term
                   : m.type == RAFT_IO_INSTALL_SNAPSHOT ? m.install_snapshot.term
                                                        : 0;
  if (term == 0 || term != raft_->current_term) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("raft: ", from, " leads term ", term,
                   ", which this node leads: it belongs to "
                   "another raft cluster; its message is dropped"));
}

absl::Status RaftNode::CanRequest() const {
  if (raft_state(raft_.get()) != RAFT_LEADER) {
    std::string leader = Leader();
    return absl::FailedPreconditionError(
        leader.empty() ? std::string("not the raft leader; no leader is known")
                       : absl::StrCat("not the raft leader; the leader is ", leader));
  }
  if (requests_.size() >= options_.max_in_flight) {
    return absl::ResourceExhaustedError(
        absl::StrCat("raft: ", options_.max_in_flight, " requests in flight; retry later"));
  }
  return absl::OkStatus();
}

RaftNode::Request* RaftNode::NewRequest() {
  auto request = std::make_unique<Request>();
  request->node = this;
  request->ticket = next_ticket_++;
  request->apply.data = request.get();
  request->barrier.data = request.get();
  request->change.data = request.get();
  Request* raw = request.get();
  requests_.emplace(raw, std::move(request));
  return raw;
}

void RaftNode::Complete(Request* request, Outcome outcome, std::string error) {
  Completion c;
  c.ticket = request->ticket;
  c.outcome = outcome;
  c.index = request->index;
  c.result = std::move(request->result);
  c.error = std::move(error);
  completions_.push_back(std::move(c));
  auto it = proposals_by_index_.find(request->index);
  if (it != proposals_by_index_.end() && it->second == request) proposals_by_index_.erase(it);
  requests_.erase(request);
}

namespace {

Outcome OutcomeOf(int status) {
  // Refused before entering the log: never applied. Lost leadership or shutdown after: unknown.
  return status == RAFT_NOTLEADER || status == RAFT_CANTCHANGE || status == RAFT_BADID ||
                 status == RAFT_DUPLICATEID || status == RAFT_NOTFOUND || status == RAFT_BADROLE
             ? Outcome::kNotApplied
             : Outcome::kUnknown;
}

}  // namespace

absl::StatusOr<uint64_t> RaftNode::Propose(absl::Time now, std::string_view command) {
  Tick(now);
  if (command.empty() || command.size() > options_.max_command_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("raft: a command must be 1 to ", options_.max_command_bytes, " bytes"));
  }
  if (absl::Status s = CanRequest(); !s.ok()) return s;
  Request* request = NewRequest();
  raft_buffer buf{raft_malloc(command.size()), command.size()};
  std::memcpy(buf.base, command.data(), command.size());
  int rv = raft_apply(raft_.get(), &request->apply, &buf, 1,
                      [](struct raft_apply* req, int status, void*) {
                        auto* r = static_cast<Request*>(req->data);
                        r->node->Complete(r, status == 0 ? Outcome::kApplied : OutcomeOf(status),
                                          status == 0 ? "" : raft_strerror(status));
                      });
  if (rv != 0) {
    if (rv == RAFT_NOTLEADER) raft_free(buf.base);  // otherwise the log owns it
    requests_.erase(request);
    return absl::UnavailableError(absl::StrCat("raft apply: ", raft_strerror(rv)));
  }
  request->index = request->apply.index;
  proposals_by_index_[request->index] = request;
  uint64_t ticket = request->ticket;
  Flush();
  return ticket;
}

absl::StatusOr<uint64_t> RaftNode::Barrier(absl::Time now) {
  Tick(now);
  if (absl::Status s = CanRequest(); !s.ok()) return s;
  Request* request = NewRequest();
  int rv = raft_barrier(raft_.get(), &request->barrier, [](struct raft_barrier* req, int status) {
    auto* r = static_cast<Request*>(req->data);
    r->index = req->index;
    r->node->Complete(r, status == 0 ? Outcome::kApplied : OutcomeOf(status),
                      status == 0 ? "" : raft_strerror(status));
  });
  if (rv != 0) {
    requests_.erase(request);
    return absl::UnavailableError(absl::StrCat("raft barrier: ", raft_strerror(rv)));
  }
  uint64_t ticket = request->ticket;
  Flush();
  return ticket;
}

absl::StatusOr<uint64_t> RaftNode::StartChange(int code, std::string_view what,
                                               const std::string& node, int role) {
  if (absl::Status s = CanRequest(); !s.ok()) return s;
  if (node.empty() || node.size() > options_.limits.max_address_bytes) {
    return absl::InvalidArgumentError("raft: a node id must be 1 to 255 bytes");
  }
  Request* request = NewRequest();
  auto cb = [](struct raft_change* req, int status) {
    auto* r = static_cast<Request*>(req->data);
    r->node->Complete(r, status == 0 ? Outcome::kApplied : OutcomeOf(status),
                      status == 0 ? "" : raft_strerror(status));
  };
  uint64_t id = RaftIdOf(node);
  int rv = code == 0   ? raft_add(raft_.get(), &request->change, id, node.c_str(), cb)
           : code == 1 ? raft_assign(raft_.get(), &request->change, id, role, cb)
                       : raft_remove(raft_.get(), &request->change, id, cb);
  if (rv != 0) {
    requests_.erase(request);
    std::string message =
        absl::StrCat("raft ", std::string(what), " ", node, ": ", raft_strerror(rv));
    return rv == RAFT_CANTCHANGE ? absl::FailedPreconditionError(message)
                                 : absl::InvalidArgumentError(message);
  }
  addresses_.emplace(id, node);
  uint64_t ticket = request->ticket;
  Flush();
  return ticket;
}

absl::StatusOr<uint64_t> RaftNode::AddServer(absl::Time now, const std::string& node) {
  Tick(now);
  return StartChange(0, "add", node, RAFT_SPARE);
}

absl::StatusOr<uint64_t> RaftNode::AssignRole(absl::Time now, const std::string& node, int role) {
  Tick(now);
  if (role != RAFT_VOTER && role != RAFT_STANDBY && role != RAFT_SPARE) {
    return absl::InvalidArgumentError("raft: a role is voter, standby or spare");
  }
  return StartChange(1, "assign", node, role);
}

absl::StatusOr<uint64_t> RaftNode::RemoveServer(absl::Time now, const std::string& node) {
  Tick(now);
  return StartChange(2, "remove", node, 0);
}

std::vector<Outgoing> RaftNode::TakeMessages() { return std::exchange(out_, {}); }
std::vector<Completion> RaftNode::TakeCompletions() { return std::exchange(completions_, {}); }

bool RaftNode::IsLeader() const { return raft_state(raft_.get()) == RAFT_LEADER; }

std::string RaftNode::Leader() const {
  raft_id id = 0;
  const char* address = nullptr;
  raft_leader(raft_.get(), &id, &address);
  return address != nullptr ? std::string(address) : std::string();
}

uint64_t RaftNode::Term() const { return raft_->current_term; }
uint64_t RaftNode::LastApplied() const { return raft_last_applied(raft_.get()); }
uint64_t RaftNode::CommitIndex() const { return raft_->commit_index; }

std::vector<RaftNode::Server> RaftNode::Configuration() const {
  std::vector<Server> out;
  for (unsigned i = 0; i < raft_->configuration.n; ++i) {
    const raft_server& s = raft_->configuration.servers[i];
    out.push_back({s.address != nullptr ? s.address : "", s.role});
  }
  return out;
}

}  // namespace exa::consensus
