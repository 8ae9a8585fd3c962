// exaserve.v1.Admin's answers (admin_service.h): gRPC runs these on its threads; the parts
// they read are thread-safe themselves.
#include "daemon/admin_service.h"

#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/strings.h"
#include "daemon/observer_role.h"
#include "membership/agent/keyring.h"
#include "net/grpc_status.h"

namespace exa::daemon {
namespace {

namespace pb = exaserve::v1;

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, grpc::Status s) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(std::move(s));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::Status(grpc::CallbackServerContext* context,
                                               const pb::StatusRequest*,
                                               pb::StatusResponse* response) {
  FillStatus(response);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::Members(grpc::CallbackServerContext* context,
                                                const pb::MembersRequest*,
                                                pb::MembersResponse* response) {
  FillMembers(response);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::GossipKey(grpc::CallbackServerContext* context,
                                                  const pb::GossipKeyRequest* request,
                                                  pb::GossipKeyResponse* response) {
  if (request->op() != pb::GossipKeyRequest::OP_LIST) {
    grpc::Status s = parts_.authorize(*context, "Admin.GossipKey");
    if (!s.ok()) return Done(context, s);
  }
  return Done(context, ChangeGossipKey(*request, response));
}

grpc::ServerUnaryReactor* AdminService::LabelReplicas(grpc::CallbackServerContext* context,
                                                      const pb::LabelReplicasRequest* request,
                                                      pb::LabelReplicasResponse* response) {
  grpc::Status s = parts_.authorize(*context, "Admin.LabelReplicas");
  if (!s.ok()) return Done(context, s);
  return Done(context, Relabel(*request, response));
}

grpc::ServerUnaryReactor* AdminService::Routes(grpc::CallbackServerContext* context,
                                               const pb::RoutesRequest* request,
                                               pb::RoutesResponse* response) {
  if (request->op() != pb::RoutesRequest::OP_LIST) {
    grpc::Status s = parts_.authorize(*context, "Admin.Routes");
    if (!s.ok()) return Done(context, s);
  }
  return Done(context, ChangeRoutes(*request, response));
}

grpc::ServerUnaryReactor* AdminService::BurnIn(grpc::CallbackServerContext* context,
                                               const pb::BurnInRequest*,
                                               pb::BurnInResponse* response) {
  grpc::Status s = parts_.authorize(*context, "Admin.BurnIn");
  if (!s.ok()) return Done(context, s);
  return Done(context, RunBurnIn(response));
}

grpc::ServerUnaryReactor* AdminService::Alerts(grpc::CallbackServerContext* context,
                                               const pb::AlertsRequest*,
                                               pb::AlertsResponse* response) {
  return Done(context, FillAlerts(response));
}

void AdminService::FillStatus(pb::StatusResponse* r) const {
  const DaemonOptions& options = parts_.options;
  r->set_node_id(parts_.node_id);
  for (const auto& role : parts_.roles()) r->add_roles(role);
  r->set_version(parts_.version);
  r->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - parts_.start_time));
  r->set_rack(options.node.rack);
  r->set_state(parts_.state());
  r->set_grpc_address(
      StrCat(options.network.advertise, ":", parts_.grpc ? parts_.grpc->port() : 0));
  r->set_http_address(StrCat(options.network.advertise, ":", parts_.http->port()));
  const membership::GossipAgent* gossip = parts_.gossip.get();
  if (!gossip) return;  // still starting: gossip comes up after the gRPC server
  r->set_gossip_address(StrCat(options.network.advertise, ":", gossip->port()));
  r->set_start_time_unix_seconds(absl::ToUnixSeconds(parts_.start_time));
  for (const membership::Member& m : gossip->Members()) {
    if (m.state == membership::MemberState::kAlive) r->set_members_alive(r->members_alive() + 1);
    if (m.state == membership::MemberState::kSuspect) {
      r->set_members_suspect(r->members_suspect() + 1);
    }
    if (m.state == membership::MemberState::kDead) r->set_members_dead(r->members_dead() + 1);
  }
  r->set_gossip_health_score(gossip->HealthScore());
}

void AdminService::FillMembers(pb::MembersResponse* r) const {
  absl::Time now = absl::Now();
  if (!parts_.gossip) return;
  for (const membership::Member& m : parts_.gossip->Members()) {
    auto* info = r->add_members();
    info->set_node_id(m.id);
    info->set_address(m.address);
    info->set_state(std::string(membership::MemberStateName(m.state)));
    info->set_incarnation(m.incarnation);
    // Show what each member does now (the election), which is what an operator asks.
    if (std::optional<std::vector<std::string>> elected = parts_.elected_roles(m.id)) {
      for (const auto& role : *elected) info->add_roles(role);
    } else {
      for (const auto& role : m.metadata.roles) info->add_roles(role);
    }
    info->set_rack(m.metadata.rack);
    info->set_build_version(m.metadata.build_version);
    for (const auto& taint : m.metadata.taints) info->add_taints(taint);
    info->set_gpu_count(m.metadata.gpus.count);
    info->set_gpu_class(m.metadata.gpus.model);
    info->set_nvlink_domain(m.metadata.nvlink_domain);
    info->set_replicas(m.metadata.replicas.hosted);
    if (m.metadata.http_port != 0) {
      info->set_http_address(StrCat(membership::AddressHost(m.address), ":", m.metadata.http_port));
    }
    if (m.metadata.grpc_port != 0) {
      info->set_grpc_address(StrCat(membership::AddressHost(m.address), ":", m.metadata.grpc_port));
    }
    if (m.state_changed != absl::InfinitePast()) {
      info->set_state_age_seconds(absl::ToDoubleSeconds(now - m.state_changed));
    }
  }
}

grpc::Status AdminService::Relabel(const pb::LabelReplicasRequest& req,
                                   pb::LabelReplicasResponse* resp) {
  if (!parts_.replicas) {
    return grpc::Status(grpc::FAILED_PRECONDITION, "this node hosts no replicas");
  }
  node::ReplicaHost::Labels selector(req.selector().begin(), req.selector().end());
  node::ReplicaHost::Labels set(req.labels().begin(), req.labels().end());
  std::vector<std::string> remove(req.remove().begin(), req.remove().end());
  auto matched = parts_.replicas->Relabel(selector, set, remove);
  if (!matched.ok()) return net::StatusToGrpc(matched.status());
  for (const auto& [id, labels] : *matched) {
    auto* r = resp->add_replicas();
    r->set_replica_id(id);
    r->mutable_labels()->insert(labels.begin(), labels.end());
  }
  EXA_LOG_INFO("admin", "replicas relabelled",
               {{"matched", static_cast<int64_t>(matched->size())}});
  return grpc::Status::OK;
}

grpc::Status AdminService::ChangeRoutes(const pb::RoutesRequest& req, pb::RoutesResponse* resp) {
  gateway::VersionRoutes* routes = parts_.routes.get();
  if (!routes) return grpc::Status(grpc::FAILED_PRECONDITION, "this node is not a gateway");
  absl::Status s;
  const auto& r = req.route();
  const bool write =
      req.op() == pb::RoutesRequest::OP_SET || req.op() == pb::RoutesRequest::OP_REMOVE;
  if (req.op() != pb::RoutesRequest::OP_LIST && !write) {
    return grpc::Status(grpc::INVALID_ARGUMENT, StrCat("op: ", static_cast<int>(req.op()),
                                                       ": OP_LIST, OP_SET or OP_REMOVE"));
  }
  // With a scheduler, the spec store's routes win: this gateway would take its list back
  // within 2 s, so a write here would be silently undone.
  if (const std::string scheduler = write ? parts_.route_scheduler() : ""; !scheduler.empty()) {
    return grpc::Status(
        grpc::FAILED_PRECONDITION,
        StrCat("this cluster keeps version routes in the spec store of the scheduler at ",
               scheduler, ": change them with Scheduler.Routes (exaserve-cli gateway route does)"));
  }
  if (req.op() == pb::RoutesRequest::OP_SET) {
    s = routes->Set({r.header(), r.label(), r.default_value()});
  } else if (req.op() == pb::RoutesRequest::OP_REMOVE) {
    s = routes->Remove(r.header());
  }
  if (!s.ok()) return net::StatusToGrpc(s);
  for (const gateway::VersionRoute& route : routes->List()) {
    auto* out = resp->add_routes();
    out->set_header(route.header);
    out->set_label(route.label);
    out->set_default_value(route.default_value);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::RunBurnIn(pb::BurnInResponse* resp) {
  // One at a time: a second is refused, not queued.
  if (!parts_.burn_in_mu.TryLock()) {
    return grpc::Status(grpc::RESOURCE_EXHAUSTED, "a burn-in is already running on this node");
  }
  grpc::Status status = RunBurnInLocked(resp);
  parts_.burn_in_mu.Unlock();
  return status;
}

grpc::Status AdminService::RunBurnInLocked(pb::BurnInResponse* resp) {
  GpuNode& gpus = parts_.gpus;
  if (gpus.inventory.devices.empty()) {
    return grpc::Status(grpc::FAILED_PRECONDITION,
                        StrCat("this node has no GPU to burn in (", gpus.inventory.note, ")"));
  }
  const bool passed = RunNodeBurnIn(gpus);
  resp->set_passed(passed);
  if (parts_.replicas) {
    parts_.replicas->SetRefusal(
        passed ? std::string()
               : StrCat("this node is tainted ", kBurnInFailedTaint, ": ", gpus.burn_in_failure));
  }
  resp->set_json(BurnInJson(gpus).dump());
  if (parts_.gossip) {
    // The taint follows the latest result: set on a failure, lifted by a pass. Replicas that
    // are already running keep running; the scheduler stops placing new ones here.
    parts_.gossip->UpdateMetadata([node = gpus](membership::Metadata* m) { PublishGpus(node, m); });
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::FillAlerts(pb::AlertsResponse* r) const {
  const ObserverRole* observer = parts_.observer.get();
  if (!observer) {
    return grpc::Status(grpc::FAILED_PRECONDITION,
                        "this node is not an observer (start one with --role observer)");
  }
  if (!observer->running()) {
    return grpc::Status(grpc::FAILED_PRECONDITION,
                        "this node is not an elected observer now (exaserve-cli members shows "
                        "which nodes are; or pin one with --role observer)");
  }
  observer->FillAlerts(r);
  return grpc::Status::OK;
}

grpc::Status AdminService::ChangeGossipKey(const pb::GossipKeyRequest& req,
                                           pb::GossipKeyResponse* resp) {
  if (!parts_.gossip) return grpc::Status(grpc::UNAVAILABLE, "the node is still starting");
  membership::Keyring& keyring = parts_.gossip->keyring();
  absl::Status s;
  using Op = pb::GossipKeyRequest;
  if (req.op() != Op::OP_LIST && req.op() != Op::OP_INSTALL && req.op() != Op::OP_USE &&
      req.op() != Op::OP_REMOVE) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        StrCat("op: ", static_cast<int>(req.op()),
                               ": expected OP_LIST, OP_INSTALL, OP_USE or OP_REMOVE"));
  }
  if (req.op() != Op::OP_LIST) {
    auto key = membership::Keyring::DecodeBase64Key(req.key());
    if (!key.ok()) return grpc::Status(grpc::INVALID_ARGUMENT, std::string(key.status().message()));
    switch (req.op()) {
      case Op::OP_INSTALL:
        s = keyring.Install(*key);
        break;
      case Op::OP_USE:
        s = keyring.Use(*key);
        break;
      case Op::OP_REMOVE:
        s = keyring.Remove(*key);
        break;
      default:
        return grpc::Status(grpc::INVALID_ARGUMENT, "op: expected list, install, use or remove");
    }
  }
  if (!s.ok()) return net::StatusToGrpc(s);
  EXA_LOG_INFO("membership", "gossip keyring changed", {{"op", static_cast<int>(req.op())}});
  for (const std::string& k : keyring.Keys()) {
    resp->add_keys(membership::Keyring::EncodeBase64(k));
  }
  return grpc::Status::OK;
}

}  // namespace exa::daemon
