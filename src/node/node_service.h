// exaserve.v1.Node: the node agent's API on inference-role nodes (docs/architecture.md#flows).
// Gateways call Generate (the hop to a replica), watch WatchLoad (per-replica load: 10 Hz, and
// sooner, at most 50 Hz, when a replica's slots changed) and read DescribeModels (what to
// tokenize with). A watcher that names its gateway (WatchLoadRequest.dispatcher) also learns,
// per replica, the last of that gateway's dispatches the replica took before its load was read
// (node/admitted_dispatches.h; docs/architecture.md#load-on-change).
//
// Load fan-out is bounded: at most kMaxWatchers streams; a watcher that has not taken the last
// report when the next is due skips it (reports are snapshots, the newest one wins), so a slow
// gateway never grows a queue here.
//
// Thread safety: RPC handlers run on gRPC threads; Publish and PublishIfDue run on the caller's
// thread (the daemon's load timer). Stop() ends every watch stream; call it before
// destruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/prefix_delta.h"
#include "exaserve/v1/node.grpc.pb.h"
#include "metrics/registry.h"
#include "net/admin_auth.h"
#include "node/admitted_dispatches.h"
#include "node/replica_host.h"
#include "node/term_fence.h"

namespace exa::node {

// The engines of a report's replicas, by replica id (their cached-block journals).
using Engines = absl::flat_hash_map<std::string, std::shared_ptr<engine::Engine>>;
// Where one load stream stands in each replica's journal.
struct CacheCursor {
  uint64_t epoch = 0;
  uint64_t seq = 0;
  absl::Time sent = absl::InfinitePast();
};
using CacheCursors = absl::flat_hash_map<std::string, CacheCursor>;

// Cached-block events per replica and per report (docs/architecture.md#prefix-cache): 8 bytes
// each, so a report stays under 512 KiB of deltas; a replica's snapshot that does not fit what is
// left of a report goes out in a later one, and one holds at most 32768 hashes (512 Ki tokens of
// 16-token blocks; past it the gateway does not know of the rest).
inline constexpr size_t kMaxCacheEventsPerReplica = 4096;
inline constexpr size_t kMaxCacheSnapshotPerReplica = 32768;
// A replica's events go out at most this often per stream, or sooner once this many wait: the
// gateway's index trails the replica by at most half a second.
inline constexpr absl::Duration kCacheDeltaInterval = absl::Milliseconds(500);
inline constexpr uint64_t kEagerCacheEvents = 1024;
inline constexpr size_t kMaxCacheEventsPerReport = 65536;

// One replica's entry of a load report (labels apart), from its engine's load.
void FillReplicaLoad(const std::string& id, const std::string& model, const std::string& version,
                     bool ready, const engine::EngineLoad& load, exaserve::v1::ReplicaLoad* out);

// The cached-block journal of a replica by id (null: none).
using JournalOf = std::function<const engine::PrefixJournal*(const std::string&)>;
// Adds to each replica of `report` what its journal recorded past `cursors` (advancing them),
// within the bounds above; the edge between the engine's plain deltas and the proto.
void AddCacheDeltas(exaserve::v1::LoadReport& report, const JournalOf& journal_of,
                    CacheCursors& cursors, absl::Time now);
void ToProto(const PrefixCacheDelta& delta, exaserve::v1::PrefixCacheDelta* out);

class NodeService final : public exaserve::v1::Node::CallbackService {
 public:
  static constexpr size_t kMaxWatchers = 64;

  // `routable(replica_id)`: the replica passes its health checks and the node is not draining.
  // `why_not(replica_id)`: when it does not, the state and reason ListReplicas shows.
  struct NotRoutable {
    std::string state;  // "unhealthy" or "draining"
    std::string reason;
  };
  // `authorize`: StartReplica, StopReplica and StageModel change the node and ask it first
  // (docs/security.md#admin-rpcs); empty: they are open.
  NodeService(std::string node_id, ReplicaHost& host,
              std::function<bool(const std::string&)> routable,
              std::function<NotRoutable(const std::string&)> why_not, metrics::Registry& registry,
              net::AdminAuthorizer authorize = {});
  ~NodeService() override;

  grpc::ServerWriteReactor<exaserve::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context,
      const exaserve::v1::NodeGenerateRequest* request) override;
  grpc::ServerWriteReactor<exaserve::v1::LoadReport>* WatchLoad(
      grpc::CallbackServerContext* context, const exaserve::v1::WatchLoadRequest* request) override;
  grpc::ServerUnaryReactor* ListReplicas(grpc::CallbackServerContext* context,
                                         const exaserve::v1::ListReplicasRequest* request,
                                         exaserve::v1::ListReplicasResponse* response) override;
  grpc::ServerUnaryReactor* DescribeModels(grpc::CallbackServerContext* context,
                                           const exaserve::v1::DescribeModelsRequest* request,
                                           exaserve::v1::DescribeModelsResponse* response) override;
  grpc::ServerUnaryReactor* StartReplica(grpc::CallbackServerContext* context,
                                         const exaserve::v1::StartReplicaRequest* request,
                                         exaserve::v1::ReplicaStatus* response) override;
  grpc::ServerUnaryReactor* StageModel(grpc::CallbackServerContext* context,
                                       const exaserve::v1::StageModelRequest* request,
                                       exaserve::v1::StageModelResponse* response) override;
  grpc::ServerUnaryReactor* StopReplica(grpc::CallbackServerContext* context,
                                        const exaserve::v1::StopReplicaRequest* request,
                                        exaserve::v1::ReplicaStatus* response) override;

  // Keeps the highest scheduler term that commanded this node in `path`, so that a restart
  // does not let a deposed leader's late commands through (node/term_fence.h). Call before
  // serving; errors name the file.
  absl::Status OpenTermFence(std::string path) { return fence_.Open(std::move(path)); }

  // The daemon's boot id (its starting gossip incarnation), listed by ListReplicas.
  void set_boot_id(uint64_t boot_id) { boot_id_.store(boot_id); }

  // Sends a fresh load snapshot to every watcher that is ready for one.
  void Publish();
  // The same when the last report is report_period old, or sooner when a replica's sequences,
  // blocked count or readiness changed since: called at 50 Hz, a gateway learns that a batch
  // slot filled or freed within 20 ms, not up to 100 ms late
  // (docs/architecture.md#load-on-change).
  void PublishIfDue(absl::Time now);
  // 100 ms unless a test says otherwise.
  void set_report_period(absl::Duration period) {
    absl::MutexLock lock(&mu_);
    report_period_ = period;
  }
  // Ends every watch stream (drain, shutdown); new watches are refused afterwards.
  void Stop();

  // The load of every local replica, as one report (also what the local gateway routes on).
  exaserve::v1::LoadReport Snapshot();

  size_t watchers();

  class Watcher;

 private:
  exaserve::v1::LoadReport SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What PublishIfDue compares, per replica.
  struct SlotState {
    std::string id;
    int64_t sequences = 0;  // running + waiting
    int32_t blocked = 0;
    bool ready = false;
    bool operator==(const SlotState&) const = default;
  };
  std::vector<SlotState> SlotStateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the local replicas admitted of each gateway's dispatches; read before their load.
  std::shared_ptr<const AdmittedDispatches::Marks> AdmittedLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OfferLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The loaded replicas' engines by id, for the cached-block deltas of the reports.
  std::shared_ptr<const Engines> EnginesNow() const;
  void FillStatus(const ReplicaView& view, exaserve::v1::ReplicaStatus* out) const;
  // Deletes the watchers gRPC is done with.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string node_id_;
  ReplicaHost& host_;
  std::function<bool(const std::string&)> routable_;
  std::function<NotRoutable(const std::string&)> why_not_;
  net::AdminAuthorizer authorize_;
  TermFence fence_;              // refuses a deposed scheduler leader's late commands
  AdmittedDispatches admitted_;  // its own lock: Generate notes without mu_
  std::atomic<uint64_t> boot_id_{0};
  absl::Mutex mu_;
  std::vector<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SlotState> published_state_ ABSL_GUARDED_BY(mu_);  // at the last report
  absl::Time published_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration report_period_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(100);
  metrics::Counter& generate_requests_;
  metrics::Counter& watch_refused_;
};

// The model descriptions a gateway needs (tokenizer.json read from each model's directory).
absl::StatusOr<exaserve::v1::DescribeModelsResponse> DescribeModels(const std::string& node_id,
                                                                    const ReplicaHost& host);

}  // namespace exa::node
