#include "scheduler/cluster_client.h"

#include "common/logging.h"
#include "common/strings.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "exaserve/v1/node.grpc.pb.h"
#include "exaserve/v1/scheduler.grpc.pb.h"
#include "net/tls.h"

namespace exa::scheduler {
namespace pb = exaserve::v1;

std::string MemberGrpcAddress(const membership::Member& m) {
  if (m.metadata.grpc_port == 0) return "";
  return StrCat(membership::AddressHost(m.address), ":", m.metadata.grpc_port);
}

bool Live(const membership::Member& m) {
  return m.state == membership::MemberState::kAlive || m.state == membership::MemberState::kSuspect;
}

NodeReport ReportFromProto(const std::string& node, const pb::ListReplicasResponse& r) {
  NodeReport out;
  out.node = node;
  out.boot_id = r.boot_id();
  out.pulls_models = r.pulls_models();
  out.staged_models = {r.staged_models().begin(), r.staged_models().end()};
  out.replicas.reserve(r.replicas_size());
  for (const pb::ReplicaStatus& s : r.replicas()) {
    ReportedReplica rep;
    rep.replica_id = s.replica_id();
    rep.state = s.state();
    rep.reason = s.reason();
    rep.model = s.model();
    rep.version = s.version();
    rep.generation = static_cast<uint64_t>(std::max<int64_t>(0, s.generation()));
    rep.devices = {std::max(0, s.device())};
    rep.state_since = absl::FromUnixMillis(s.state_since_unix_ms());
    rep.labels = cluster::Labels(s.labels().begin(), s.labels().end());
    rep.inter_token_p99_ms = s.inter_token_p99_ms();
    rep.ttft_p99_ms = s.ttft_p99_ms();
    rep.error_rate = s.error_rate();
    rep.recent_finished = s.recent_finished();
    rep.memory_bytes = static_cast<uint64_t>(std::max<int64_t>(0, s.memory_bytes()));
    rep.pending_tokens = std::max<int64_t>(0, s.pending_tokens());
    rep.running_sequences = std::max(0, s.running_sequences());
    rep.waiting_sequences = std::max(0, s.waiting_sequences());
    rep.queue_time_p90_ms = s.queue_time_p90_ms();
    out.replicas.push_back(std::move(rep));
  }
  return out;
}

ClusterClient::ClusterClient(std::string self, absl::Duration rpc_timeout, std::string token)
    : self_(std::move(self)), rpc_timeout_(rpc_timeout), token_(std::move(token)) {}

std::shared_ptr<grpc::Channel> ClusterClient::ChannelFor(const std::string& address) {
  absl::MutexLock lock(&channels_mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  // Bounded: nodes come and go; a full cache starts over (channels reconnect lazily).
  if (channels_.size() >= 4096) channels_.clear();
  // Keepalive: after a partition heals, a stop of a stale copy must not wait behind the old,
  // dead TCP connection (the network fault test saw 20-50 s without it).
  auto channel = net::NewChannel(address, net::PeerChannelArgs());
  channels_.emplace(address, channel);
  return channel;
}

void ClusterClient::Prepare(grpc::ClientContext& context) const {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(rpc_timeout_));
  if (!token_.empty()) context.AddMetadata("authorization", StrCat("Bearer ", token_));
}

void ClusterClient::WaitIdle(absl::Duration limit) {
  const absl::Time until = absl::Now() + limit;
  while ((commands_.load() > 0 || frames_.load() > 0) && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::vector<NodeReport> ClusterClient::Poll(const std::vector<membership::Member>& members,
                                            std::map<std::string, std::string>* addresses) {
  struct Call {
    std::string node;
    grpc::ClientContext context;
    pb::ListReplicasRequest request;
    pb::ListReplicasResponse response;
    grpc::Status status;
  };
  struct Polls {
    absl::Mutex mu;
    int outstanding ABSL_GUARDED_BY(mu) = 0;
  };
  auto polls = std::make_shared<Polls>();
  std::vector<std::shared_ptr<Call>> calls;
  for (const membership::Member& m : members) {
    std::string address = MemberGrpcAddress(m);
    if (!Live(m) || address.empty() || m.metadata.gpus.count == 0) continue;
    (*addresses)[m.id] = address;
    auto call = std::make_shared<Call>();
    call->node = m.id;
    Prepare(call->context);
    calls.push_back(call);
  }
  {
    absl::MutexLock lock(&polls->mu);
    polls->outstanding = static_cast<int>(calls.size());
  }
  for (const auto& call : calls) {
    auto stub = pb::Node::NewStub(ChannelFor((*addresses)[call->node]));
    stub->async()->ListReplicas(&call->context, &call->request, &call->response,
                                [call, polls](grpc::Status s) {
                                  absl::MutexLock lock(&polls->mu);
                                  call->status = std::move(s);
                                  --polls->outstanding;
                                });
  }
  {
    absl::MutexLock lock(&polls->mu);
    polls->mu.Await(absl::Condition(
        +[](int* outstanding) { return *outstanding == 0; }, &polls->outstanding));
  }
  std::vector<NodeReport> reports;
  for (const auto& call : calls) {
    if (call->status.ok()) reports.push_back(ReportFromProto(call->node, call->response));
  }
  return reports;
}

void ClusterClient::Execute(const std::vector<NodeAction>& actions,
                            const std::vector<Relabel>& relabels,
                            const std::map<std::string, std::string>& addresses, uint64_t term,
                            Failed failed) {
  SendRelabels(relabels, addresses);
  for (const NodeAction& a : actions) {
    auto address = addresses.find(a.action.node);
    if (address == addresses.end()) continue;  // unreachable: the next step retries
    SendAction(a, address->second, term, failed);
  }
}

// Admin.LabelReplicas for each running replica whose labels miss the stored rules.
void ClusterClient::SendRelabels(const std::vector<Relabel>& relabels,
                                 const std::map<std::string, std::string>& addresses) {
  for (const Relabel& fix : relabels) {
    auto address = addresses.find(fix.node);
    if (address == addresses.end()) continue;
    struct Call {
      grpc::ClientContext context;
      pb::LabelReplicasRequest request;
      pb::LabelReplicasResponse response;
    };
    auto call = std::make_shared<Call>();
    Prepare(call->context);
    (*call->request.mutable_selector())["replica"] = fix.replica_id;
    call->request.mutable_labels()->insert(fix.change.set.begin(), fix.change.set.end());
    for (const std::string& k : fix.change.remove) call->request.add_remove(k);
    auto stub = pb::Admin::NewStub(ChannelFor(address->second));
    commands_++;
    stub->async()->LabelReplicas(
        &call->context, &call->request, &call->response, [this, call, fix](grpc::Status s) {
          if (!s.ok()) {
            EXA_LOG_WARN(
                "scheduler", "relabel failed",
                {{"replica", fix.replica_id}, {"node", fix.node}, {"error", s.error_message()}});
          }
          commands_--;
        });
  }
}

void ClusterClient::SendAction(const NodeAction& na, const std::string& address, uint64_t term,
                               const Failed& failed) {
  struct Call {
    grpc::ClientContext context;
    pb::StartReplicaRequest start;
    pb::StopReplicaRequest stop;
    pb::ReplicaStatus response;
    pb::StageModelRequest stage;
    pb::StageModelResponse staged;
    NodeAction action;
    std::string what;
  };
  const Action& a = na.action;
  auto call = std::make_shared<Call>();
  call->action = na;
  call->what = a.kind == ActionKind::kPrestage
                   ? StrCat("prestage ", a.weights, " on ", a.node)
                   : StrCat(ActionKindName(a.kind), " ", a.replica_id(), " on ", a.node);
  Prepare(call->context);
  auto stub = pb::Node::NewStub(ChannelFor(address));
  commands_++;
  auto done = [this, call, failed](grpc::Status s) {
    if (!s.ok()) failed(call->action, call->what, s.error_message());
    commands_--;
  };
  if (a.kind == ActionKind::kPrestage) {
    // The node pulls in the background; the reconciler asks again each step until the node
    // reports the model staged.
    const size_t at = a.weights.rfind('@');
    call->stage.set_model(a.weights.substr(0, at));
    call->stage.set_version(at == std::string::npos ? "" : a.weights.substr(at + 1));
    call->stage.set_scheduler_term(term);
    stub->async()->StageModel(&call->context, &call->stage, &call->staged,
                              [this, call, failed](grpc::Status s) {
                                if (!s.ok()) {
                                  failed(call->action, call->what, s.error_message());
                                } else if (call->staged.state() == "failed") {
                                  failed(call->action, call->what, call->staged.reason());
                                }
                                commands_--;
                              });
    return;
  }
  if (a.kind == ActionKind::kStart) {
    pb::StartReplicaRequest& r = call->start;
    r.set_model(na.model);
    r.set_version(na.version);
    r.set_replica_id(a.replica_id());
    r.set_generation(static_cast<int64_t>(a.generation));
    r.set_scheduler_term(term);
    r.set_backend(na.backend);
    if (na.backend == "cuda" && !a.allocation.gpus.empty()) r.set_device(a.allocation.gpus[0]);
    r.mutable_labels()->insert(na.labels.begin(), na.labels.end());
    stub->async()->StartReplica(&call->context, &call->start, &call->response, done);
  } else {
    call->stop.set_replica_id(a.replica_id());
    call->stop.set_scheduler_term(term);
    stub->async()->StopReplica(&call->context, &call->stop, &call->response, done);
  }
}

void ClusterClient::SendFrame(const std::string& address, std::string frame) {
  struct Call {
    grpc::ClientContext context;
    pb::ReplicateRequest request;
    pb::ReplicateResponse response;
  };
  auto call = std::make_shared<Call>();
  call->request.set_from(self_);
  call->request.set_type(pb::ReplicateRequest::RAFT);
  call->request.set_frame(std::move(frame));
  Prepare(call->context);
  auto stub = pb::Scheduler::NewStub(ChannelFor(address));
  frames_++;
  stub->async()->Replicate(&call->context, &call->request, &call->response,
                           [this, call](grpc::Status) { frames_--; });
}

}  // namespace exa::scheduler
