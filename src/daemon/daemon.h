// The composition root (docs/architecture.md#module-map): builds the services this node's roles
// need, starts them, and runs the lifecycle — starting → ready → draining → stopped.
//
// Run() blocks until SIGTERM or SIGINT, then drains: /readyz and gRPC health turn 503 /
// NOT_SERVING, listeners stop accepting, in-flight requests get lifecycle.drain_timeout to
// finish, and Run() returns 0. A second signal cuts the drain short. Under systemd the daemon
// reports READY=1, STOPPING=1 and, when WatchdogSec is set, keeps the watchdog fed.
//
// Thread safety: construct, Start and Run on the main thread; RequestDrain from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "cluster/stable_election.h"
#include "daemon/admin_guard.h"
#include "daemon/gpu_node.h"
#include "daemon/node_identity.h"
#include "daemon/options.h"
#include "gateway/frontend.h"
#include "gateway/inference_service.h"
#include "gateway/remote_backend.h"
#include "membership/agent/gossip_agent.h"
#include "metrics/registry.h"
#include "net/grpc_server.h"
#include "net/http_server.h"
#include "net/io_runner.h"
#include "node/node_service.h"
#include "node/replica_host.h"
#include "node/replica_metrics.h"
#include "node/replica_prober.h"
#include "router/replica_table.h"
#include "scheduler/scheduler_service.h"

namespace exa::daemon {

class AdminService;

// The build's version string, e.g. "0.1.0".
const char* Version();

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Prepares the data dir and node id and starts every listener. Errors name the path or port
  // and the flag that sets it.
  absl::Status Start();
  // Blocks until a drain is requested, drains, and stops. Returns the process exit code.
  int Run();
  void RequestDrain();

  enum class State { kStarting, kReady, kDraining, kStopped };
  State state() const { return state_.load(); }
  const std::string& node_id() const { return node_id_; }

 private:
  // The open, read-only endpoints: /healthz, /readyz, /metrics.
  // /healthz and /readyz, and /metrics unless `metrics` is false (metrics.listen is set).
  void AddHttpRoutes(net::HttpServer& http, bool metrics);
  void AddMetricsRoute(net::HttpServer& http);
  absl::Status StartMetricsHttp();
  void WatchSignals();
  void StartWatchdog();
  // Load reports every 100 ms and the election every second, each first at once.
  void StartTimers();
  absl::Status WriteEndpointsFile();
  absl::Status StartGossip();
  absl::Status StartHttp();
  absl::Status MakeAdminService();  // the guard, then the Admin service (daemon_admin.cc)
  absl::Status StartServing();
  absl::Status StartGateway();  // the gateway role: router table, backends, frontend
  absl::Status OpenScheduler();
  // Who may call admin RPCs here (daemon/admin_guard.h): the token file, or the token this node
  // made in its data dir; logs how the node is exposed.
  absl::Status MakeAdminGuard();
  grpc::Status AuthorizeAdmin(const grpc::ServerContextBase& context,
                              std::string_view method) const;
  void PumpLoad();
  // The load timer's period: a load report goes out on a slot change at most this often (50 Hz);
  // PumpLoad runs every fifth tick (10 Hz).
  static constexpr absl::Duration kLoadChangePeriod = absl::Milliseconds(20);
  uint64_t load_ticks_ = 0;  // on the io thread only
  // A local replica may take traffic: the node is ready and the replica passes its checks.
  bool Routable(const std::string& replica_id) const;
  // Hands the membership view to the gateway's remote backend (on the io threads); an auto node
  // that is not an elected gateway watches no one.
  void FeedMembership();
  // Pinned gateway, or an auto node the election made a gateway.
  bool GatewayActive() const;
  // Live members holding the gateway role in this node's view, at least 1.
  int LiveGateways() const;
  // An auto node that joins a cluster: election may give it storage, observer or scheduler at
  // run time.
  bool ElectableControlRoles() const;
  void FollowElectedObserver();
  void FollowElectedScheduler();
  void JoinSchedulerSwitch();
  bool RunsScheduler(const membership::Member& m) const;
  // `m` is pinned to `role` or, in this node's view, elected to it.
  bool HoldsRole(const membership::Member& m, std::string_view role) const;
  void RunElection();
  void SyncRoutes();
  void StartHealthChecks();
  // Performance level of health: takes slow replicas out of routing, readmits recovered ones.
  void EjectSlow();
  void ScheduleProbe(absl::Duration delay);
  // This node's roles: elected from the membership view (pinned roles are kept as pinned).
  std::vector<std::string> CurrentRoles() const;
  // The roles the election gives member `id` now; nullopt when it names none for it.
  std::optional<std::vector<std::string>> ElectedRoles(const std::string& id) const;
  std::string RackStoragePeer() const;
  std::string RouteScheduler() const;
  void Drain();

  DaemonOptions options_;
  std::vector<std::string> roles_;
  std::string node_id_;
  std::optional<DataDirLock> data_dir_lock_;
  absl::Time start_time_;
  std::atomic<State> state_{State::kStarting};
  std::atomic<int> drain_requests_{0};
  absl::Notification drain_requested_;
  absl::Notification drain_forced_;

  metrics::Registry registry_;
  net::IoRunner io_;
  std::unique_ptr<net::HttpServer> http_;
  std::unique_ptr<net::HttpServer> https_;         // the OpenAI API over TLS, when configured
  std::unique_ptr<net::HttpServer> metrics_http_;  // /metrics alone, with metrics.listen
  std::unique_ptr<net::GrpcServer> grpc_;
  std::unique_ptr<membership::GossipAgent> gossip_;
  cluster::StableElection election_;  // owned by the io strand timer
  mutable absl::Mutex roles_mu_;
  cluster::Assignment assignment_ ABSL_GUARDED_BY(roles_mu_);
  std::unique_ptr<node::ReplicaHost> replicas_;
  // Inventory for the gossip metadata, warm-up timings, burn-in. Read and written by Start
  // before the node serves; after that only by the Admin service's burn-in, under burn_in_mu_
  // (AdminParts::gpus is annotated with it).
  GpuNode gpus_;
  absl::Mutex burn_in_mu_;           // one burn-in at a time
  uint16_t published_replicas_ = 0;  // the replica count in our gossip metadata (load tick)
  std::unique_ptr<node::ReplicaProber> prober_;
  std::unique_ptr<node::ReplicaMetrics> replica_metrics_;
  std::unique_ptr<class LocalReplicaBackend> local_backend_;
  std::unique_ptr<node::NodeService> node_service_;
  // Local replicas' health as the prober last saw it (absent: not probed yet, routable).
  mutable absl::Mutex health_mu_;
  std::map<std::string, bool> replica_healthy_ ABSL_GUARDED_BY(health_mu_);
  std::map<std::string, std::string> replica_reason_ ABSL_GUARDED_BY(health_mu_);
  // What every replica holds in its prefix cache: fed by the load streams (remote_) and the local
  // engines' journals (local_backend_), read by the table. Declared first: the others point here.
  router::PrefixIndex prefix_index_;
  std::unique_ptr<router::ReplicaTable> table_;
  std::unique_ptr<gateway::RemoteBackend> remote_;
  std::unique_ptr<gateway::VersionRoutes> routes_;
  metrics::Counter* ejections_ = nullptr;
  std::unique_ptr<gateway::Frontend> frontend_;
  std::unique_ptr<gateway::InferenceService> inference_service_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<class WeightsRole> weights_;
  std::unique_ptr<scheduler::SchedulerService> scheduler_;
  // An elected scheduler's Start or Stop in progress (FollowElectedScheduler).
  absl::Mutex scheduler_switch_mu_;
  std::thread scheduler_switch_ ABSL_GUARDED_BY(scheduler_switch_mu_);
  std::atomic<bool> scheduler_switching_{false};
  uint64_t election_ticks_ = 0;  // on the io strand timer
  bool seen_peers_ = false;      // on the io strand timer: the view once held another member
  std::atomic<int> route_syncs_in_flight_{0};
  std::string route_sync_target_;                      // on the io strand timer
  std::shared_ptr<grpc::Channel> route_sync_channel_;  // on the io strand timer
  std::unique_ptr<class ObserverRole> observer_;       // daemon/observer_role.h
  std::unique_ptr<AdminGuard> admin_guard_;
  std::string own_admin_token_;  // <data_dir>/admin.token; empty with admin.token_file
  struct Timers;
  std::unique_ptr<Timers> timers_;
};

}  // namespace exa::daemon
