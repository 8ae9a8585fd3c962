#include "daemon/daemon.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <fstream>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "daemon/admin_service.h"
#include "daemon/local_backend.h"
#include "daemon/node_identity.h"
#include "daemon/observer_role.h"
#include "daemon/weights_role.h"
#include "engine/model_config.h"
#include "engine/rpc/generate_stream.h"
#include "exaserve/v1/scheduler.grpc.pb.h"
#include "gateway/openai_api.h"
#include "metrics/host_metrics.h"
#include "net/grpc_status.h"
#include "net/tls.h"
#include "nlohmann/json.hpp"
#include "router/outliers.h"
#include "scheduler/node_view.h"

namespace exa::daemon {

namespace asio = boost::asio;

const char* Version() { return EXASERVE_VERSION; }

namespace {

// Runs `tick` every `period` on `timer` (the first after one period) until the timer is
// cancelled; a tick never overlaps the next.
void Every(asio::steady_timer& timer, absl::Duration period, std::function<void()> tick) {
  timer.expires_after(absl::ToChronoNanoseconds(period));
  timer.async_wait([&timer, period, tick = std::move(tick)](const boost::system::error_code& ec) {
    if (ec) return;
    tick();
    Every(timer, period, tick);
  });
}

}  // namespace

struct Daemon::Timers {
  explicit Timers(asio::io_context& io)
      : signals(io, SIGTERM, SIGINT, SIGHUP),
        watchdog(io),
        load(io),
        election(io),
        process_check(io),
        model_probe(io),
        probe_collect(io),
        performance(io),
        stream_check(io) {}
  asio::signal_set signals;
  asio::steady_timer watchdog;
  asio::steady_timer load;
  asio::steady_timer election;
  // Each health check chain re-arms itself after it ran, so a chain never overlaps itself; the
  // prober serializes the two chains.
  asio::steady_timer process_check;
  asio::steady_timer model_probe;
  asio::steady_timer probe_collect;
  asio::steady_timer performance;
  asio::steady_timer stream_check;  // the gateway's broken-stream scan
};

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      roles_(ResolveRoles(options_)),
      io_(options_.lifecycle.io_threads),
      election_(cluster::ElectionConfig{.nodes_per_observer = options_.gossip.nodes_per_observer},
                options_.gossip.election_hold_down),
      timers_(std::make_unique<Timers>(io_.context())) {}

Daemon::~Daemon() {
  JoinSchedulerSwitch();
  if (https_) https_->CloseAll();
  if (http_) http_->CloseAll();
  if (metrics_http_) metrics_http_->CloseAll();
  io_.Stop();
}

absl::Status Daemon::Start() {
  start_time_ = absl::Now();
  // Every channel this node opens (to peers' Node, Weights, Scheduler and Admin services)
  // presents its certificate when TLS is configured; exaserved checked the files already.
  if (options_.tls.enabled()) EXA_RETURN_IF_ERROR(net::UseClientTls(options_.tls));
  EXA_ASSIGN_OR_RETURN(node_id_, LoadOrCreateNodeId(options_.node.data_dir, options_.node.id));
  EXA_ASSIGN_OR_RETURN(DataDirLock lock, DataDirLock::Acquire(options_.node.data_dir));
  data_dir_lock_.emplace(std::move(lock));
  metrics::RegisterProcessMetrics(registry_, Version());
  metrics::RegisterNetworkMetrics(registry_);  // NIC counters for the network alert
  gpus_ = PrepareGpus(registry_);              // GPU hook: before replicas load onto the GPUs
  if (options_.inference.backend == "cuda" && options_.inference.burn_in &&
      HasRole(roles_, "inference")) {
    RunNodeBurnIn(gpus_);  // a failure taints the node: no replicas below
  }
  registry_.AddGaugeCallback("exaserve_ready", "1 when this node accepts traffic, else 0.",
                             [this] { return state_ == State::kReady ? 1.0 : 0.0; });
  auto& roles_metric = registry_.AddGauge(
      "exaserve_node_role", "Roles whose services this node started; the value is always 1.",
      {"role"});
  for (const std::string& r : roles_) roles_metric.WithLabels({r}).Set(1);

  EXA_RETURN_IF_ERROR(MakeAdminService());
  EXA_RETURN_IF_ERROR(StartServing());
  EXA_RETURN_IF_ERROR(StartHttp());
  grpc_ = std::make_unique<net::GrpcServer>(options_.grpc);
  grpc_->RegisterService(admin_.get());
  if (inference_service_) grpc_->RegisterService(inference_service_.get());
  if (node_service_) grpc_->RegisterService(node_service_.get());
  weights_ = std::make_unique<WeightsRole>(options_, registry_);
  // An auto node in a cluster can be elected its rack's storage node at any time (and lose it
  // when the view changes), so with an upstream origin it runs the rack cache service from the
  // start. Its rack's nodes pull from it while the election names it (RackStoragePeer, and the
  // CLI through Members); a cache that is no longer elected only stops being asked.
  const bool electable_storage = ElectableControlRoles() && options_.weights.origin_dir.empty() &&
                                 !options_.weights.origin.empty();
  EXA_RETURN_IF_ERROR(weights_->Start(HasRole(roles_, "storage") || electable_storage));
  if (replicas_) {
    // StartReplica by model name pulls through the node cache: local → rack peer → origin.
    replicas_->SetModelFetch([this](const std::string& name, const std::string& version) {
      return weights_->PullModel(name, version, [this] { return RackStoragePeer(); });
    });
  }
  if (weights_->service()) grpc_->RegisterService(weights_->service());
  // An auto node in a cluster may be elected a scheduler: its store is open (and answers peers'
  // repairs) from the start; the control loop runs while the election names it (RunElection).
  if (HasRole(roles_, "scheduler") || ElectableControlRoles()) {
    EXA_RETURN_IF_ERROR(OpenScheduler());
  }
  // An auto node in a cluster may be elected an observer (one per gossip.nodes_per_observer
  // live nodes): it holds one ready and starts it while the election names it (RunElection).
  if (HasRole(roles_, "observer") || ElectableControlRoles()) {
    // Scrapes every member found through gossip (which starts below, before the first round).
    observer_ = std::make_unique<ObserverRole>(
        options_.observer, node_id_,
        StrCat("http://", options_.network.advertise, ":", http_->port()), io_, registry_, [this] {
          return ScrapeTargets(gossip_ ? gossip_->Members() : std::vector<membership::Member>{});
        });
    if (HasRole(roles_, "observer")) EXA_RETURN_IF_ERROR(observer_->Start());
  }
  if (absl::Status s = grpc_->Start(); !s.ok()) {
    return absl::UnavailableError(StrCat(ToStd(s.message()), "; set another with --grpc-port"));
  }
  // Gossip starts last: the first alive message carries the bound service ports.
  EXA_RETURN_IF_ERROR(StartGossip());
  if (scheduler_ && HasRole(roles_, "scheduler")) scheduler_->Start();
  WatchSignals();
  StartWatchdog();
  io_.Start();
  EXA_RETURN_IF_ERROR(WriteEndpointsFile());
  state_ = State::kReady;
  StartTimers();
  StartHealthChecks();
  grpc_->SetServing(true);
  weights_->StartPrestage([this] { return RackStoragePeer(); });
  sd_notify(0, "READY=1\nSTATUS=serving");
  std::string roles;
  for (const auto& r : roles_) StrAppend(&roles, roles.empty() ? "" : ",", r);
  EXA_LOG_INFO("daemon", "ready",
               {{"node_id", node_id_},
                {"roles", roles},
                {"version", Version()},
                {"http", StrCat(options_.network.bind, ":", http_->port())},
                {"https", https_ ? StrCat(options_.network.bind, ":", https_->port()) : "off"},
                {"grpc", StrCat(options_.network.bind, ":", grpc_->port())},
                {"data_dir", options_.node.data_dir}});
  return absl::OkStatus();
}

// The scheduler role (scheduler/scheduler_service.h): the spec store under the data dir, the
// Scheduler API and the control loop. Schedulers are the members pinned to the role or elected
// to it (RunsScheduler).
absl::Status Daemon::OpenScheduler() {
  scheduler::SchedulerServiceOptions o;
  o.node_id = node_id_;
  o.data_dir = options_.node.data_dir;
  o.reconcile_interval = options_.scheduler.reconcile_interval;
  o.rpc_timeout = options_.scheduler.rpc_timeout;
  o.placement.small_cluster_max_nodes = options_.scheduler.small_cluster_max_nodes;
  o.leaks.interval = options_.scheduler.leak_sample_interval;
  o.leaks.rising_samples = options_.scheduler.leak_rising_samples;
  o.leaks.min_growth = options_.scheduler.leak_min_growth;
  o.recycle_leaking = options_.scheduler.leak_action == "recycle";
  if (!options_.scheduler.node_token_file.empty()) {
    std::ifstream in(options_.scheduler.node_token_file);
    if (!in || !std::getline(in, o.node_token) || o.node_token.empty()) {
      return absl::InvalidArgumentError(
          StrCat("scheduler.node_token_file: cannot read a token from ",
                 options_.scheduler.node_token_file));
    }
  } else {
    o.node_token = own_admin_token_;  // a lone node, or nodes that share it (docs/security.md)
  }
  scheduler::SchedulerEnv env;
  env.registry = &registry_;
  env.normalize_route = [](exaserve::v1::VersionRoute* r) -> absl::Status {
    EXA_ASSIGN_OR_RETURN(gateway::VersionRoute n,
                         gateway::NormalizeRoute({r->header(), r->label(), r->default_value()}));
    r->set_header(n.header);
    r->set_label(n.label);
    return absl::OkStatus();
  };
  env.members = [this] { return gossip_ ? gossip_->Members() : std::vector<membership::Member>{}; };
  env.is_scheduler = [this](const membership::Member& m) { return RunsScheduler(m); };
  env.authorize = [this](const grpc::ServerContextBase& c, std::string_view m) {
    return AuthorizeAdmin(c, m);
  };
  env.model_shape = [this](const std::string& model,
                           const std::string& version) -> absl::StatusOr<scheduler::ModelShape> {
    // config.json alone (not the weights): a scheduler node plans, it does not serve.
    EXA_ASSIGN_OR_RETURN(WeightsRole::ModelFile file,
                         weights_->ReadModelFile(model, version, "config.json", 1 << 20,
                                                 [this] { return RackStoragePeer(); }));
    EXA_ASSIGN_OR_RETURN(
        engine::ModelConfig config,
        engine::ParseModelConfig(file.text, StrCat(model, "@", version, "/config.json")));
    scheduler::ModelShape shape = scheduler::ShapeFromConfig(model, config);
    if (file.checkpoint_bytes > 0) shape.checkpoint_bytes = file.checkpoint_bytes;
    return shape;
  };
  EXA_ASSIGN_OR_RETURN(scheduler_, scheduler::SchedulerService::Open(o, std::move(env)));
  grpc_->RegisterService(scheduler_.get());
  return absl::OkStatus();
}

absl::Status Daemon::StartServing() {
  if (HasRole(roles_, "inference")) {
    node::InferenceOptions inference = options_.inference;
    inference.gpu_count = static_cast<int>(gpus_.inventory.devices.size());
    for (const auto& d : gpus_.inventory.devices)
      inference.gpu_memory_bytes.push_back(d.memory_bytes);
    inference.drain_timeout = options_.lifecycle.drain_timeout;
    replicas_ = std::make_unique<node::ReplicaHost>(node_id_, inference);
    EXA_RETURN_IF_ERROR(replicas_->UseLabelsFile(options_.node.data_dir + "/replica-labels.json"));
    if (gpus_.burn_in_failure.empty()) {
      EXA_RETURN_IF_ERROR(replicas_->Start());
    } else {
      EXA_LOG_ERROR("node", "no replica started: the node failed its GPU burn-in",
                    {{"taint", kBurnInFailedTaint}, {"reason", gpus_.burn_in_failure}});
      replicas_->SetRefusal(
          StrCat("this node is tainted ", kBurnInFailedTaint, ": ", gpus_.burn_in_failure));
    }
    const bool cuda = options_.inference.backend == "cuda";
    replica_metrics_ = std::make_unique<node::ReplicaMetrics>(
        *replicas_, registry_, cuda ? inference.gpu_count : 0,
        cuda ? 0 : options_.inference.host_memory_budget.value);
    if (cuda && !gpus_.inventory.devices.empty()) {
      replica_metrics_->SetDeviceMemoryReader(
          [inventory = gpus_.inventory]()
              -> absl::StatusOr<std::vector<node::ReplicaMetrics::DeviceMemory>> {
            EXA_ASSIGN_OR_RETURN(std::vector<engine::cuda::GpuMemoryUse> read,
                                 engine::cuda::ReadGpuMemory(inventory));
            std::vector<node::ReplicaMetrics::DeviceMemory> out;
            for (const auto& d : read) out.push_back({d.index, d.used_bytes, d.total_bytes});
            return out;
          });
    }
    node_service_ = std::make_unique<node::NodeService>(
        node_id_, *replicas_, [this](const std::string& id) { return Routable(id); },
        [this](const std::string& id) -> node::NodeService::NotRoutable {
          if (state_ != State::kReady) return {"draining", "the node is not ready or is draining"};
          absl::MutexLock lock(&health_mu_);
          auto it = replica_reason_.find(id);
          return {"unhealthy", it == replica_reason_.end() ? std::string() : it->second};
        },
        registry_,
        [this](const grpc::ServerContextBase& c, std::string_view m) {
          return AuthorizeAdmin(c, m);
        });
    EXA_RETURN_IF_ERROR(node_service_->OpenTermFence(options_.node.data_dir + "/scheduler-term"));
  }
  if (HasRole(roles_, "gateway")) EXA_RETURN_IF_ERROR(StartGateway());
  return absl::OkStatus();
}

// A gateway routes to replicas in its own process directly and to every other node's replicas
// through their Node service, fed by their load streams (gateway/remote_backend.h).
absl::Status Daemon::StartGateway() {
  EXA_ASSIGN_OR_RETURN(router::Policy policy, router::ParsePolicy(options_.gateway.routing_policy));
  table_ = std::make_unique<router::ReplicaTable>(policy, absl::ToUnixNanos(absl::Now()));
  table_->SetPrefixIndex(&prefix_index_);
  if (replicas_) {
    local_backend_ = std::make_unique<LocalReplicaBackend>(*replicas_, &prefix_index_);
    local_backend_->Register(*table_);
  }
  remote_ = std::make_unique<gateway::RemoteBackend>(node_id_, local_backend_.get(), *table_,
                                                     prefix_index_, registry_);
  frontend_ = std::make_unique<gateway::Frontend>(options_.gateway, *remote_, *table_, registry_);
  Every(timers_->performance, options_.health.performance_interval, [this] { EjectSlow(); });
  // Mid-stream failover (docs/architecture.md#failover): stalled streams and those on a replica
  // that looks dead are resumed elsewhere; a changed gateway.rate_limits_file is read again.
  Every(timers_->stream_check, absl::Milliseconds(100), [this] {
    frontend_->Tick(absl::Now());
    // A model scaled to zero got its first waiting request: tell the scheduler now, not at the
    // next 2 s sync (docs/architecture.md#autoscaling).
    if (frontend_->activator().TakeNewDemand()) SyncRoutes();
  });
  routes_ =
      std::make_unique<gateway::VersionRoutes>(options_.node.data_dir + "/gateway-routes.json");
  EXA_RETURN_IF_ERROR(routes_->Load());
  frontend_->SetRoutes(routes_.get());
  ejections_ = &registry_.SimpleCounter(
      "exaserve_gateway_ejections_total",
      "Replicas taken out of routing by the performance level (slow versus their peers).");
  registry_.AddGaugeCallback("exaserve_gateway_replicas_ejected",
                             "Replicas out of routing for being slow versus their peers.", [this] {
                               double n = 0;
                               for (const auto& r : table_->List()) n += r.ejected ? 1 : 0;
                               return n;
                             });
  EXA_RETURN_IF_ERROR(frontend_->LoadApiKeys());
  inference_service_ = std::make_unique<gateway::InferenceService>(*frontend_);
  return absl::OkStatus();
}

bool Daemon::Routable(const std::string& replica_id) const {
  if (state_ != State::kReady) return false;
  absl::MutexLock lock(&health_mu_);
  auto it = replica_healthy_.find(replica_id);
  return it == replica_healthy_.end() || it->second;
}

void Daemon::FeedMembership() {
  if (!remote_ || !gossip_) return;
  bool active = GatewayActive();
  frontend_->SetActive(active);
  frontend_->SetGatewayCount(LiveGateways());  // rate-limit shares (docs/operations.md#rate-limits)
  remote_->UpdateMembers(active ? gossip_->Members() : std::vector<membership::Member>{},
                         absl::Now());
}

bool Daemon::GatewayActive() const {
  if (!HasRole(roles_, "gateway")) return false;
  if (options_.node.roles != std::vector<std::string>{"auto"}) return true;  // pinned
  return HasRole(CurrentRoles(), "gateway");
}

// Process and model levels of health for local replicas (docs/architecture.md#health-checks). An
// unhealthy replica leaves routing at once and returns when it passes again.
void Daemon::StartHealthChecks() {
  if (!replicas_) return;
  prober_ = std::make_unique<node::ReplicaProber>(
      *replicas_, options_.health, registry_,
      [this](const std::string& id, bool healthy, const std::string& reason) {
        {
          absl::MutexLock lock(&health_mu_);
          replica_healthy_[id] = healthy;
          replica_reason_[id] = reason;
        }
        if (table_) table_->SetHealthy(id, healthy);
      });
  Every(timers_->process_check, options_.health.process_interval,
        [this] { prober_->CheckProcesses(); });
  // The first probe right away: it records the golden answer and proves the path end to end.
  ScheduleProbe(absl::ZeroDuration());
}

// Performance level (docs/architecture.md#health-checks), on gateways: replicas far slower than
// their model's median leave routing (they are reported, not killed) and return once they are back
// within the factor.
void Daemon::EjectSlow() {
  router::OutlierOptions o{options_.health.performance_factor,
                           options_.health.performance_min_peers};
  std::vector<router::ReplicaSnapshot> snapshot = table_->List();
  std::map<std::string, router::Outlier> outliers;
  for (router::Outlier& x : router::SlowOutliers(snapshot, o)) outliers[x.id] = x;
  for (const router::ReplicaSnapshot& r : snapshot) {
    auto it = outliers.find(r.info.id);
    bool eject = it != outliers.end();
    if (eject == r.ejected) continue;
    table_->SetEjected(r.info.id, eject);
    if (eject) {
      ejections_->Increment();
      EXA_LOG_WARN("gateway", "replica ejected: slow",
                   {{"replica", r.info.id},
                    {"itl_p99_ms", it->second.itl_p99_ms},
                    {"model_median_ms", it->second.model_median_ms},
                    {"factor", options_.health.performance_factor}});
    } else {
      EXA_LOG_INFO("gateway", "replica readmitted", {{"replica", r.info.id}});
    }
  }
}

void Daemon::ScheduleProbe(absl::Duration delay) {
  timers_->model_probe.expires_after(absl::ToChronoNanoseconds(delay));
  timers_->model_probe.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    prober_->SendProbes();
    timers_->probe_collect.expires_after(absl::ToChronoNanoseconds(options_.health.probe_timeout));
    timers_->probe_collect.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      prober_->CollectProbes();
      ScheduleProbe(options_.health.model_interval);
    });
  });
}

// Recomputes role election from the membership view once a second (cluster/election.h): every
// node computes the same assignment from the same view; StableElection holds a change back
// until the view has been stable, so roles do not flap.
void Daemon::StartTimers() {
  PumpLoad();
  Every(timers_->load, kLoadChangePeriod, [this] {
    // Every fifth tick the gauges and the local router's view; every tick, a load report when
    // the last is 100 ms old or a replica's slots changed.
    if (++load_ticks_ % 5 == 0) PumpLoad();
    if (node_service_) node_service_->PublishIfDue(absl::Now());
  });
  RunElection();
  Every(timers_->election, absl::Seconds(1), [this] { RunElection(); });
}

void Daemon::RunElection() {
  std::vector<cluster::ElectionNode> view;
  for (const membership::Member& m : gossip_->Members()) {
    if (m.state != membership::MemberState::kAlive &&
        m.state != membership::MemberState::kSuspect) {
      continue;
    }
    view.push_back({m.id, m.metadata.rack, cluster::ParseRoleList(m.metadata.roles)});
  }
  // A node joining through seeds elects nothing from a view of itself alone: it would name itself
  // to every control role (a scheduler, an observer...) until the seed's state arrives.
  seen_peers_ = seen_peers_ || view.size() > 1;
  if (!view.empty() && (seen_peers_ || options_.network.join.empty())) {
    const cluster::Assignment& a = election_.Update(absl::Now(), view);
    absl::MutexLock lock(&roles_mu_);
    if (a != assignment_) {
      auto mine = a.find(node_id_);
      EXA_LOG_INFO("cluster", "roles elected",
                   {{"members", static_cast<int64_t>(a.size())},
                    {"mine", mine == a.end() ? std::string("none") : mine->second.ToString()}});
      assignment_ = a;
    }
  }
  FollowElectedObserver();
  FollowElectedScheduler();
  FeedMembership();  // also retries broken load streams
  if (++election_ticks_ % 2 == 0) SyncRoutes();
}

// A gateway in a cluster with schedulers follows the version routes of the spec store: every 2 s
// it asks the lowest-id live scheduler (Scheduler.Routes) and takes its list. Without a scheduler
// the gateway's own routes (Admin.Routes) stand. The same call reports the models it holds
// requests for with no replica, and learns which models may be at zero replicas (scale from
// zero, gateway/activator.h).
void Daemon::SyncRoutes() {
  if (!routes_ || !gossip_ || !GatewayActive() || route_syncs_in_flight_.load() > 0) return;
  const std::string target = RouteScheduler();
  if (target.empty()) return;
  struct Call {
    grpc::ClientContext context;
    exaserve::v1::RoutesRequest request;
    exaserve::v1::RoutesResponse response;
    std::unique_ptr<exaserve::v1::Scheduler::Stub> stub;
  };
  auto call = std::make_shared<Call>();
  call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  for (std::string& model : frontend_->activator().Waiting(absl::Now())) {
    call->request.add_waiting_models(std::move(model));
  }
  if (target != route_sync_target_) {  // one channel per scheduler, not one per 2 s tick
    route_sync_target_ = target;
    route_sync_channel_ = net::NewChannel(target, net::PeerChannelArgs());
  }
  call->stub = exaserve::v1::Scheduler::NewStub(route_sync_channel_);
  route_syncs_in_flight_++;
  call->stub->async()->Routes(
      &call->context, &call->request, &call->response, [this, call](grpc::Status s) {
        if (s.ok()) {
          std::vector<gateway::VersionRoute> routes;
          for (const auto& r : call->response.routes()) {
            routes.push_back({r.header(), r.label(), r.default_value()});
          }
          if (absl::Status st = routes_->ReplaceAll(routes); !st.ok()) {
            EXA_LOG_WARN("gateway", "routes from the spec store not applied",
                         {{"error", std::string(st.message())}});
          }
          const auto& models = call->response.activatable_models();
          frontend_->activator().SetActivatable({models.begin(), models.end()});
        }
        route_syncs_in_flight_--;
      });
}

// The scheduler whose spec store holds the version routes (the lowest-id live one, host:port of
// its gRPC); empty when the cluster has none.
std::string Daemon::RouteScheduler() const {
  if (!gossip_) return "";
  std::string target, target_id;
  for (const membership::Member& m : gossip_->Members()) {
    if (m.state != membership::MemberState::kAlive || m.metadata.grpc_port == 0 ||
        !RunsScheduler(m)) {
      continue;
    }
    if (target_id.empty() || m.id < target_id) {
      target_id = m.id;
      target = StrCat(membership::AddressHost(m.address), ":", m.metadata.grpc_port);
    }
  }
  return target;
}

// The rack's storage peer for weight pulls: a live member of this rack with the storage role,
// pinned or elected.
std::string Daemon::RackStoragePeer() const {
  if (!gossip_) return "";
  return FindRackPeer(gossip_->Members(), node_id_, options_.node.rack,
                      [this](const membership::Member& m) { return HoldsRole(m, "storage"); });
}

std::optional<std::vector<std::string>> Daemon::ElectedRoles(const std::string& id) const {
  absl::MutexLock lock(&roles_mu_);
  auto it = assignment_.find(id);
  if (it == assignment_.end()) return std::nullopt;
  return it->second.Names();
}

std::vector<std::string> Daemon::CurrentRoles() const {
  absl::MutexLock lock(&roles_mu_);
  auto it = assignment_.find(node_id_);
  if (it == assignment_.end()) return roles_;
  return it->second.Names();
}

// Refreshes local replica load at 10 Hz (docs/architecture.md#flows): the per-replica gauges and
// the router's view when this node is also a gateway (load watchers: NodeService::PublishIfDue).
void Daemon::PumpLoad() {
  if (!replicas_) return;
  replica_metrics_->Update();
  if (local_backend_) local_backend_->ReportLoad(*table_, state_ == State::kReady);
  // Replicas started or stopped (StartReplica/StopReplica): the gossip summary follows.
  if (gossip_) {
    const auto count =
        static_cast<uint16_t>(std::min<size_t>(replicas_->replicas().size(), 0xffff));
    if (count != published_replicas_) {
      published_replicas_ = count;
      gossip_->UpdateMetadata([count](membership::Metadata* m) { m->replicas = {count, count}; });
    }
  }
}

absl::Status Daemon::StartGossip() {
  auto keyring = std::make_shared<membership::Keyring>(options_.gossip.cluster_name);
  if (!options_.gossip.key_file.empty()) {
    EXA_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                         membership::Keyring::ReadKeyFile(options_.gossip.key_file));
    for (std::string& k : keys) EXA_RETURN_IF_ERROR(keyring->Install(std::move(k)));
  }
  membership::GossipAgentOptions gossip_options;
  gossip_options.bind_address = options_.network.bind;
  gossip_options.port = options_.network.gossip_port;
  gossip_options.advertise_address = options_.network.advertise;
  gossip_options.join = options_.network.join;
  gossip_options.core = GossipCoreConfig(options_);
  gossip_options.cluster_name = options_.gossip.cluster_name;
  gossip_ =
      std::make_unique<membership::GossipAgent>(io_, gossip_options, std::move(keyring), registry_);
  membership::SwimCore::LocalNode self;
  self.id = node_id_;
  self.metadata.roles = options_.node.roles;
  self.metadata.rack = options_.node.rack;
  self.metadata.build_version = Version();
  PublishGpus(gpus_, &self.metadata);  // GPU hook: inventory, NVLink, burn-in taint
  if (replicas_ && options_.inference.backend != "cuda" &&
      options_.inference.host_memory_budget.value > 0) {
    // A CPU node offers its host memory budget to the scheduler as one device (node_view.h).
    self.metadata.gpus.count = 1;
    self.metadata.gpus.memory_mib_each = static_cast<uint32_t>(std::min<uint64_t>(
        options_.inference.host_memory_budget.value >> 20, std::numeric_limits<uint32_t>::max()));
    self.metadata.gpus.model = std::string(scheduler::kCpuDeviceModel);
  }
  self.metadata.grpc_port = static_cast<uint16_t>(grpc_->port());
  self.metadata.http_port = static_cast<uint16_t>(http_->port());
  if (replicas_) {
    // Replicas load before gossip starts, so the first alive message already carries them.
    auto count = static_cast<uint16_t>(std::min<size_t>(replicas_->replicas().size(), 0xffff));
    self.metadata.replicas = {count, count};
    published_replicas_ = count;
  }
  EXA_ASSIGN_OR_RETURN(self.incarnation, NextIncarnation(options_.node.data_dir));
  if (node_service_) node_service_->set_boot_id(self.incarnation);
  if (remote_) {
    // Membership changes reach the router at once (a suspected node leaves routing now); the
    // work runs on the io threads, off the gossip strand.
    gossip_->Subscribe([this](const membership::Event&) {
      asio::post(io_.context(), [this] { FeedMembership(); });
    });
  }
  if (absl::Status s = gossip_->Start(self); !s.ok()) {
    return absl::Status(s.code(), StrCat(ToStd(s.message()), "; set another with --gossip-port"));
  }
  return absl::OkStatus();
}

void Daemon::WatchSignals() {
  timers_->signals.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (signal == SIGHUP) {
      // Its default action would kill the node on the spot, with no drain. There is no reload:
      // a changed config takes a restart (systemctl restart drains first).
      EXA_LOG_WARN("daemon",
                   "SIGHUP ignored: exaserved does not reload; restart it to apply a "
                   "changed config",
                   {});
    } else {
      EXA_LOG_INFO("daemon", "signal received", {{"signal", signal}});
      RequestDrain();
    }
    WatchSignals();
  });
}

void Daemon::StartWatchdog() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  // systemd's advice: ping at half the WatchdogSec interval.
  Every(timers_->watchdog, absl::Microseconds(usec / 2), [] { sd_notify(0, "WATCHDOG=1"); });
}

absl::Status Daemon::WriteEndpointsFile() {
  nlohmann::json j = {{"node_id", node_id_},
                      {"pid", getpid()},
                      {"http_port", http_->port()},
                      {"https_port", https_ ? https_->port() : 0},
                      {"metrics_port", metrics_http_ ? metrics_http_->port() : http_->port()},
                      {"grpc_port", grpc_->port()},
                      {"gossip_port", gossip_->port()},
                      {"advertise", options_.network.advertise}};
  return WriteFileAtomically(options_.node.data_dir + "/endpoints.json", j.dump() + "\n");
}

void Daemon::RequestDrain() {
  int n = ++drain_requests_;
  if (n == 1) {
    drain_requested_.Notify();
  } else if (n == 2) {
    EXA_LOG_WARN("daemon", "second signal: stopping without waiting for in-flight requests");
    drain_forced_.Notify();
  }
}

int Daemon::Run() {
  drain_requested_.WaitForNotification();
  Drain();
  return 0;
}

void Daemon::Drain() {
  state_ = State::kDraining;
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
  absl::Time deadline = absl::Now() + options_.lifecycle.drain_timeout;
  const auto in_flight = [this] { return http_->in_flight() + (https_ ? https_->in_flight() : 0); };
  EXA_LOG_INFO("daemon", "draining",
               {{"in_flight", in_flight()},
                {"drain_timeout", DurationToString(options_.lifecycle.drain_timeout)}});
  grpc_->SetServing(false);
  if (frontend_) frontend_->StartDraining();
  // Load streams end now: gateways take this node's replicas out of routing at once, while the
  // Generate calls already running finish below.
  if (node_service_) node_service_->Stop();
  http_->StopAccepting();
  if (https_) https_->StopAccepting();
  if (metrics_http_) metrics_http_->StopAccepting();
  while (in_flight() > 0 && absl::Now() < deadline &&
         !drain_forced_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
  }
  if (in_flight() > 0) {
    EXA_LOG_WARN("daemon", "drain timeout: cutting off requests", {{"in_flight", in_flight()}});
  }
  if (observer_) observer_->Stop();
  weights_->Stop();
  JoinSchedulerSwitch();  // no new switch starts: the node is draining
  if (scheduler_) scheduler_->Stop();
  for (int i = 0; i < 200 && route_syncs_in_flight_.load() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  grpc_->Shutdown(drain_forced_.HasBeenNotified() ? absl::Now() : deadline);
  if (remote_) remote_->Stop();
  // Tell the cluster we are leaving on purpose, so peers mark us left, not dead.
  gossip_->Leave(std::min(deadline, absl::Now() + absl::Seconds(1)));
  gossip_->Stop();
  http_->CloseAll();
  if (https_) https_->CloseAll();
  if (metrics_http_) metrics_http_->CloseAll();
  timers_->signals.cancel();
  timers_->watchdog.cancel();
  timers_->load.cancel();
  timers_->election.cancel();
  timers_->process_check.cancel();
  timers_->model_probe.cancel();
  timers_->probe_collect.cancel();
  timers_->performance.cancel();
  timers_->stream_check.cancel();
  io_.Stop();
  if (replicas_) replicas_->Stop();
  state_ = State::kStopped;
  EXA_LOG_INFO("daemon", "stopped");
}

}  // namespace exa::daemon
