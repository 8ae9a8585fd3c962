// exaserve.v1.Node: the node agent's API on inference-role nodes (docs/architecture.md#flows).
// Gateways call Generate (the hop to a replica), watch WatchLoad (per-replica load, at most 10 Hz)
// and read DescribeModels (what to tokenize with).
//
// Load fan-out is bounded: at most kMaxWatchers streams; a watcher that has not taken the last
// report when the next is due skips it (reports are snapshots, the newest one wins), so a slow
// gateway never grows a queue here.
//
// Thread safety: RPC handlers run on gRPC threads; Publish runs on the caller's thread (the
// daemon's 10 Hz load timer). Stop() ends every watch stream; call it before destruction.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "exaserve/v1/node.grpc.pb.h"
#include "metrics/registry.h"
#include "node/replica_host.h"

namespace exa::node {

class NodeService final : public exaserve::v1::Node::CallbackService {
 public:
  static constexpr size_t kMaxWatchers = 64;

  // `routable(replica_id)`: the replica passes its health checks and the node is not draining.
  // `why_not(replica_id)`: when it does not, the state and reason ListReplicas shows.
  struct NotRoutable {
    std::string state;  // "unhealthy" or "draining"
    std::string reason;
  };
  // `authorize(authorization metadata)`: StartReplica, StopReplica and StageModel change the node
  // and need the admin token (OK when none is configured).
  NodeService(std::string node_id, ReplicaHost& host,
              std::function<bool(const std::string&)> routable,
              std::function<NotRoutable(const std::string&)> why_not, metrics::Registry& registry,
              std::function<grpc::Status(std::string_view)> authorize = {});
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

  // The daemon's boot id (its starting gossip incarnation), listed by ListReplicas.
  void set_boot_id(uint64_t boot_id) { boot_id_.store(boot_id); }

  // Sends a fresh load snapshot to every watcher that is ready for one.
  void Publish();
  // Ends every watch stream (drain, shutdown); new watches are refused afterwards.
  void Stop();

  // The load of every local replica, as one report (also what the local gateway routes on).
  exaserve::v1::LoadReport Snapshot();

  size_t watchers();

  class Watcher;

 private:
  exaserve::v1::LoadReport SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillStatus(const ReplicaView& view, exaserve::v1::ReplicaStatus* out) const;
  // Deletes the watchers gRPC is done with.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string node_id_;
  ReplicaHost& host_;
  std::function<bool(const std::string&)> routable_;
  std::function<NotRoutable(const std::string&)> why_not_;
  std::function<grpc::Status(std::string_view)> authorize_;
  std::atomic<uint64_t> boot_id_{0};
  absl::Mutex mu_;
  std::vector<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  metrics::Counter& generate_requests_;
  metrics::Counter& watch_refused_;
};

// The model descriptions a gateway needs (tokenizer.json read from each model's directory).
absl::StatusOr<exaserve::v1::DescribeModelsResponse> DescribeModels(const std::string& node_id,
                                                                    const ReplicaHost& host);

}  // namespace exa::node
