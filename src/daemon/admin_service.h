// exaserve.v1.Admin: what exaserve-cli asks a node (docs/architecture.md#roles): its status and
// membership view, version labels and routes, the GPU burn-in, the observer's alerts and the
// gossip keyring. The daemon only wires it, handing over references to the parts it owns
// (AdminParts); the answers are made here.
//
// Thread-safety: gRPC runs the handlers on its threads, several at once. Parts that come up after
// the gRPC server (gossip) or only with a role (replicas, routes, observer) are read through the
// daemon's owning pointers at call time, null while absent; each part is thread-safe itself. One
// burn-in runs at a time (`burn_in_mu`); a second is refused, not queued.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/gpu_node.h"
#include "daemon/options.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "gateway/version_routes.h"
#include "membership/agent/gossip_agent.h"
#include "net/admin_auth.h"
#include "net/grpc_server.h"
#include "net/http_server.h"
#include "node/replica_host.h"

namespace exa::daemon {

class ObserverRole;

// What the Admin service answers from: references into the daemon, which outlives the service.
struct AdminParts {
  const DaemonOptions& options;
  const std::string& node_id;
  const absl::Time& start_time;
  std::string version;
  const std::unique_ptr<net::GrpcServer>& grpc;
  const std::unique_ptr<net::HttpServer>& http;
  const std::unique_ptr<membership::GossipAgent>& gossip;
  const std::unique_ptr<node::ReplicaHost>& replicas;
  const std::unique_ptr<gateway::VersionRoutes>& routes;
  const std::unique_ptr<ObserverRole>& observer;
  absl::Mutex& burn_in_mu;
  // Written by a burn-in, so read and written here only under burn_in_mu (the daemon touches it
  // only before it serves).
  GpuNode& gpus ABSL_GUARDED_BY(burn_in_mu);
  // "starting", "ready" or "draining".
  std::function<std::string()> state;
  // This node's roles now: pinned, or as the election gives them.
  std::function<std::vector<std::string>()> roles;
  // The roles the election gives member `id` now; nullopt when it names none for it.
  std::function<std::optional<std::vector<std::string>>(const std::string& id)> elected_roles;
  // The scheduler whose spec store holds the version routes; empty when the cluster has none.
  std::function<std::string()> route_scheduler;
  // Asked before every operation that changes the node (docs/security.md#admin-rpcs).
  net::AdminAuthorizer authorize;
};

class AdminService final : public exaserve::v1::Admin::CallbackService {
 public:
  explicit AdminService(AdminParts parts) : parts_(std::move(parts)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const exaserve::v1::StatusRequest*,
                                   exaserve::v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* Members(grpc::CallbackServerContext* context,
                                    const exaserve::v1::MembersRequest*,
                                    exaserve::v1::MembersResponse* response) override;
  grpc::ServerUnaryReactor* GossipKey(grpc::CallbackServerContext* context,
                                      const exaserve::v1::GossipKeyRequest* request,
                                      exaserve::v1::GossipKeyResponse* response) override;
  grpc::ServerUnaryReactor* LabelReplicas(grpc::CallbackServerContext* context,
                                          const exaserve::v1::LabelReplicasRequest* request,
                                          exaserve::v1::LabelReplicasResponse* response) override;
  grpc::ServerUnaryReactor* Routes(grpc::CallbackServerContext* context,
                                   const exaserve::v1::RoutesRequest* request,
                                   exaserve::v1::RoutesResponse* response) override;
  // Runs the GPU burn-in on this node now (blocking, a few seconds) and re-taints it.
  grpc::ServerUnaryReactor* BurnIn(grpc::CallbackServerContext* context,
                                   const exaserve::v1::BurnInRequest*,
                                   exaserve::v1::BurnInResponse* response) override;
  // The observer's alerts; FAILED_PRECONDITION on a node that is not an observer.
  grpc::ServerUnaryReactor* Alerts(grpc::CallbackServerContext* context,
                                   const exaserve::v1::AlertsRequest*,
                                   exaserve::v1::AlertsResponse* response) override;

 private:
  void FillStatus(exaserve::v1::StatusResponse* response) const;
  void FillMembers(exaserve::v1::MembersResponse* response) const;
  grpc::Status ChangeGossipKey(const exaserve::v1::GossipKeyRequest& request,
                               exaserve::v1::GossipKeyResponse* response);
  grpc::Status Relabel(const exaserve::v1::LabelReplicasRequest& request,
                       exaserve::v1::LabelReplicasResponse* response);
  grpc::Status ChangeRoutes(const exaserve::v1::RoutesRequest& request,
                            exaserve::v1::RoutesResponse* response);
  grpc::Status RunBurnIn(exaserve::v1::BurnInResponse* response);
  grpc::Status RunBurnInLocked(exaserve::v1::BurnInResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(parts_.burn_in_mu);
  grpc::Status FillAlerts(exaserve::v1::AlertsResponse* response) const;

  AdminParts parts_;
};

}  // namespace exa::daemon
