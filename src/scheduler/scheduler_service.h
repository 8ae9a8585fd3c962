// The scheduler role as a service (docs/architecture.md#flows control plane,
// docs/architecture.md#consistency): the adapter around the sans-IO cores. It owns
//   - the spec store: RaftSpecStore (raft_spec_store.h), its Raft log in RocksDB under
//     <data_dir>/raft; a node that kept the older leaderless store under
//     <data_dir>/scheduler-store imports its records once it leads;
//   - exaserve.v1.Scheduler: Apply / GetSpecs / Describe / DeleteSpec / NodeOp for exaserve-cli,
//     Replicate between schedulers (the store's frames). Apply answers once every changed record
//     is committed in the Raft log and applied on this node; Apply and DeleteSpec may name the
//     resource version the caller read (optimistic concurrency, spec_versions.h);
//   - two threads: the store's, which every `tick` (at most 50 ms: Raft's heartbeats) feeds the
//     store the scheduler set from membership, ticks it and flushes it; and the control loop's,
//     which every `reconcile_interval` asks every node that offers devices for its replicas
//     (ClusterClient::Poll, in parallel, bounded by `rpc_timeout`) and steps the ControlLoop
//     (control_loop.h) with the answers and the committed state; when this node leads the Raft
//     log and has applied a barrier of its term, it stores the step's rollout state and carries
//     out its actions through Node.StartReplica / StopReplica / StageModel. Every scheduler
//     computes the status, so Describe answers anywhere; only one acts. A new step waits for the
//     previous step's commands to be answered; a slow node never delays the store's ticks.
//
// Replica ids are `<deployment>-<ordinal>` with a generation (reconciler.h); the replicas this
// service starts carry the label exaserve.io/deployment, and only those are managed. A wave's
// weights are pre-staged as a step of their own: the reconciler starts no replica of a wave
// until every node placed for it reports the model pulled and verified (ListReplicas'
// staged_models), and asks each that lacks it to pull it (Node.StageModel, an event once per
// node and model). A node without a weights fetcher counts as staged (it starts replicas from
// directories of its own).
//
// Files: scheduler_service.cc wires and runs the two threads; scheduler_rpc.cc holds the
// handlers for exaserve-cli; scheduler_store_io.cc the store's writes, reads and Raft frames;
// cluster_client.h the calls out; control_loop.h the step itself.
//
// Thread safety: the RPC handlers and the two threads share the state under `mu_`.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/label_rule.h"
#include "consensus/rocks_log_storage.h"
#include "exaserve/v1/node.pb.h"
#include "exaserve/v1/scheduler.grpc.pb.h"
#include "membership/member.h"
#include "metrics/registry.h"
#include "net/admin_auth.h"
#include "scheduler/cluster_client.h"
#include "scheduler/control_loop.h"
#include "scheduler/raft_spec_store.h"

namespace exa::scheduler {

struct SchedulerServiceOptions {
  std::string node_id;
  std::string data_dir;
  absl::Duration tick = absl::Milliseconds(200);
  absl::Duration reconcile_interval = absl::Seconds(1);
  absl::Duration rpc_timeout = absl::Seconds(2);
  // "Bearer" token presented to node agents and peer schedulers; empty: none.
  std::string node_token;
  RaftStoreConfig store;
  PlacementOptions placement;
  size_t max_events = 50;  // kept per deployment for Describe
  LeakOptions leaks;       // leak detection over the memory the nodes report
  // A flagged replica is replaced (make before break, like max lifetime); false: reported only.
  bool recycle_leaking = true;
};

struct SchedulerEnv {
  // The membership view (this node included).
  std::function<std::vector<membership::Member>()> members;
  // Whether a member holds the scheduler role (pinned or elected).
  std::function<bool(const membership::Member&)> is_scheduler;
  // Asked before every operation that changes state (docs/security.md#admin-rpcs); null: open.
  net::AdminAuthorizer authorize;
  // Validates and normalizes a version route (the gateway's rules); INVALID_ARGUMENT names the
  // field. Null: routes are refused.
  std::function<absl::Status(exaserve::v1::VersionRoute*)> normalize_route;
  // Where the deployment gauges go (exaserve_deployment_replicas_*); may be null.
  metrics::Registry* registry = nullptr;
  // The shape of a model that is not a preset (the weights store's config.json); NOT_FOUND when
  // the store does not have it. May block (a pull).
  std::function<absl::StatusOr<ModelShape>(const std::string& model, const std::string& version)>
      model_shape;
};

// What Scheduler.Replicate takes from a peer before it touches the store: keys of the kinds
// the store keeps, values their kind parses (spec YAML, else a JSON object), and versions at
// most an hour ahead of `now` (a far-future version would pin the store's clock and win over
// every later write). INVALID_ARGUMENT naming the record otherwise.
absl::Status ValidateReplicated(const exaserve::v1::ReplicateRequest& request, absl::Time now);

class SchedulerService final : public exaserve::v1::Scheduler::CallbackService {
 public:
  // Opens (or creates) the store under options.data_dir and restores it.
  static absl::StatusOr<std::unique_ptr<SchedulerService>> Open(SchedulerServiceOptions options,
                                                                SchedulerEnv env);
  ~SchedulerService() override;

  // The control thread. A node elected scheduler starts and stops it as the election names it
  // and stops naming it; after Stop it starts again (and repairs its store from the other
  // schedulers before it acts, as at process start). While stopped every RPC answers
  // UNAVAILABLE, naming the schedulers this node sees.
  void Start();
  void Stop();
  bool running() const { return running_.load(); }

  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* context,
                                  const exaserve::v1::ApplyRequest* request,
                                  exaserve::v1::ApplyResponse* response) override;
  grpc::ServerUnaryReactor* GetSpecs(grpc::CallbackServerContext* context,
                                     const exaserve::v1::GetSpecsRequest* request,
                                     exaserve::v1::GetSpecsResponse* response) override;
  grpc::ServerUnaryReactor* Describe(grpc::CallbackServerContext* context,
                                     const exaserve::v1::DescribeRequest* request,
                                     exaserve::v1::DescribeResponse* response) override;
  grpc::ServerUnaryReactor* DeleteSpec(grpc::CallbackServerContext* context,
                                       const exaserve::v1::DeleteSpecRequest* request,
                                       exaserve::v1::DeleteSpecResponse* response) override;
  grpc::ServerUnaryReactor* NodeOp(grpc::CallbackServerContext* context,
                                   const exaserve::v1::NodeOpRequest* request,
                                   exaserve::v1::NodeOpResponse* response) override;
  grpc::ServerUnaryReactor* Rollout(grpc::CallbackServerContext* context,
                                    const exaserve::v1::RolloutRequest* request,
                                    exaserve::v1::RolloutResponse* response) override;
  grpc::ServerUnaryReactor* Routes(grpc::CallbackServerContext* context,
                                   const exaserve::v1::RoutesRequest* request,
                                   exaserve::v1::RoutesResponse* response) override;
  grpc::ServerUnaryReactor* LabelRules(grpc::CallbackServerContext* context,
                                       const exaserve::v1::LabelReplicasRequest* request,
                                       exaserve::v1::LabelRulesResponse* response) override;
  grpc::ServerUnaryReactor* Replicate(grpc::CallbackServerContext* context,
                                      const exaserve::v1::ReplicateRequest* request,
                                      exaserve::v1::ReplicateResponse* response) override;

 private:
  SchedulerService(SchedulerServiceOptions options, SchedulerEnv env,
                   std::unique_ptr<consensus::RocksLogStorage> storage,
                   std::vector<StoreRecord> legacy);

  // A client call that finishes when a set of store writes is acknowledged (or one failed).
  struct WriteWaiter {
    grpc::ServerUnaryReactor* reactor = nullptr;
    std::set<uint64_t> ids;
    grpc::Status failure;  // the first write's refusal (ABORTED for a stale version)
  };
  void RunStore();
  void RunControl();
  // Persists, sends and settles what the store produced. Releases mu_ while it sends and answers,
  // so other calls may run in between.
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(std::vector<StoreFrame> frames);
  // Answers with `answer()` (run under mu_) once this node's store reflects every write
  // acknowledged before the call (a Raft read index: RaftSpecStore::Read); UNAVAILABLE when no
  // read index comes in time.
  grpc::ServerUnaryReactor* ReadThen(grpc::CallbackServerContext* context,
                                     std::function<grpc::Status()> answer);
  // What a call does once this node's store is current (run under mu_): its answer, or nullopt
  // when it started writes that finish `reactor` (StartWritesLocked).
  using AfterRead = std::function<std::optional<grpc::Status>(grpc::ServerUnaryReactor* reactor)>;
  // As ReadThen, for a call that decides what to write from what it read: `apply` of a spec a
  // stale scheduler holds unchanged, or `delete` of one it does not hold yet, must not be
  // answered from that scheduler's own state.
  grpc::ServerUnaryReactor* ReadThenWrite(grpc::CallbackServerContext* context, AfterRead then);
  // Writes the records of the store this node kept before the Raft log (imported once, by the
  // first leader that holds them; a key already present is left as it is). Needs mu_.
  void ImportLegacyLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts writes for `writes` (key → value; nullopt deletes) and finishes `reactor` once every
  // one is acknowledged. `expected`: key → the resource version the caller read; when any is
  // named the writes go as one transaction, refused whole (ABORTED) if one is stale
  // (spec_versions.h). Needs mu_.
  void WriteLocked(const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
                   grpc::ServerUnaryReactor* reactor,
                   const std::map<std::string, uint64_t>& expected = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WriteLocked without the flush (the caller flushes): the status to finish `reactor` with when
  // no write could start, nullopt when they started.
  std::optional<grpc::Status> StartWritesLocked(
      const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
      grpc::ServerUnaryReactor* reactor, const std::map<std::string, uint64_t>& expected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Apply and DeleteSpec once this node's store is current (AfterRead).
  std::optional<grpc::Status> ApplyLocked(const exaserve::v1::ApplyRequest& request,
                                          const std::vector<InferenceReplicaSpec>& specs,
                                          const std::map<std::string, uint64_t>& named,
                                          exaserve::v1::ApplyResponse* response,
                                          grpc::ServerUnaryReactor* reactor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<grpc::Status> DeleteLocked(const exaserve::v1::DeleteSpecRequest& request,
                                           grpc::ServerUnaryReactor* reactor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> ReplicaBytes(const InferenceReplicaSpec& spec);
  // Looks up the shapes of stored specs' models that are not presets (a restarted scheduler, or
  // a spec another scheduler took).
  void LearnModels();
  // One control step: polls the nodes, runs the control loop, stores what it wrote and carries
  // out its actions (when this node leads).
  void ReconcileStep();
  // Exports the control loop's figures (exaserve_deployment_replicas_*, ...). Needs mu_.
  void NoteWaitingLocked(const exaserve::v1::RoutesRequest& request,
                         exaserve::v1::RoutesResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExportLocked(const ControlOutput& out, bool acting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddEventLocked(const std::string& deployment, std::string message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    loop_.AddEvent(absl::Now(), deployment, std::move(message));
  }
  // Describe's answer from what this node holds. Needs mu_.
  grpc::Status DescribeLocked(const exaserve::v1::DescribeRequest& request,
                              exaserve::v1::DescribeResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `method`: the RPC's name, as the audit log shows it ("Scheduler.Apply").
  grpc::Status Authorize(grpc::CallbackServerContext* context, std::string_view method) const;
  // UNAVAILABLE while the control thread is stopped (this node is not a scheduler now), naming
  // the live schedulers in this node's view; OK while running.
  grpc::Status CheckRunning() const;

  const SchedulerServiceOptions options_;
  const SchedulerEnv env_;
  std::unique_ptr<consensus::RocksLogStorage> storage_;  // the Raft log, <data_dir>/raft

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<RaftSpecStore> store_ ABSL_GUARDED_BY(mu_);
  // The pre-Raft store's records, until imported.
  std::vector<StoreRecord> legacy_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<WriteWaiter>> waiters_ ABSL_GUARDED_BY(mu_);  // by write id
  struct ReadWaiter {
    grpc::ServerUnaryReactor* reactor = nullptr;
    AfterRead then;
  };
  std::map<uint64_t, ReadWaiter> readers_ ABSL_GUARDED_BY(mu_);  // by read id
  ControlLoop loop_ ABSL_GUARDED_BY(mu_);
  // Catalog entries learned from the weights store, and the "model@version"s it was found to have.
  std::set<std::string> store_models_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> store_versions_ ABSL_GUARDED_BY(mu_);

  // Per deployment, as this scheduler last computed them (every scheduler exports the same
  // figures; alerts take the max over schedulers).
  metrics::Family<metrics::Gauge>* desired_gauge_ = nullptr;
  metrics::Family<metrics::Gauge>* ready_gauge_ = nullptr;
  metrics::Family<metrics::Gauge>* pending_gauge_ = nullptr;
  metrics::Gauge* reconciler_gauge_ = nullptr;
  metrics::Gauge* leaking_gauge_ = nullptr;
  // This scheduler's view of the Raft log (docs/architecture.md#consistency).
  metrics::Gauge* raft_term_gauge_ = nullptr;
  metrics::Gauge* raft_voters_gauge_ = nullptr;
  metrics::Gauge* raft_applied_gauge_ = nullptr;
  metrics::Family<metrics::Counter>* rollbacks_ = nullptr;
  metrics::Family<metrics::Counter>* replacements_ = nullptr;  // deployment, cause
  metrics::Family<metrics::Gauge>* autoscale_desired_ = nullptr;
  metrics::Family<metrics::Gauge>* autoscale_ready_after_ = nullptr;
  metrics::Family<metrics::Counter>* autoscale_decisions_ = nullptr;  // deployment, direction

  ClusterClient client_;
  absl::Mutex start_mu_;                                 // serializes Start and Stop
  std::thread thread_ ABSL_GUARDED_BY(start_mu_);        // RunControl
  std::thread store_thread_ ABSL_GUARDED_BY(start_mu_);  // RunStore
  std::atomic<bool> running_{false};
};

}  // namespace exa::scheduler
