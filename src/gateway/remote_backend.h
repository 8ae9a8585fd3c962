// Routes a gateway's requests to replicas on other nodes (docs/architecture.md#flows data plane):
// it follows the membership view, opens one Node.WatchLoad stream per node that hosts replicas,
// keeps the router's ReplicaTable fed from those reports, learns each model's tokenizer through
// Node.DescribeModels, and streams Generate calls to the chosen replica's node. Replicas in this
// process go to the local backend without a network hop.
//
// Failure handling: a node membership suspects leaves routing at once; a load stream that breaks
// takes the node's replicas out of routing until it is back (retried every second); a node that
// is dead or gone is forgotten. A Generate stream that breaks ends with UNAVAILABLE, which the
// Frontend retries on another replica when no token was sent yet.
//
// Thread safety: every method may be called from any thread. Submit never calls the request's
// callback synchronously.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "exaserve/v1/node.grpc.pb.h"
#include "gateway/frontend.h"
#include "membership/member.h"
#include "metrics/registry.h"
#include "router/prefix_index.h"
#include "router/replica_table.h"

namespace exa::gateway {

// A load report's cached-block delta in plain form; INVALID_ARGUMENT names what is malformed.
absl::StatusOr<PrefixCacheDelta> PrefixCacheDeltaFromProto(const exaserve::v1::PrefixCacheDelta& p);

class RemoteBackend final : public ReplicaBackend {
 public:
  // `local` serves the replicas of this process (any id no load stream reported); may be null.
  // `prefix_index` (shared with the table and the local replicas) follows the remote replicas'
  // cached-block reports; it must outlive this backend.
  RemoteBackend(std::string self_node_id, ReplicaBackend* local, router::ReplicaTable& table,
                router::PrefixIndex& prefix_index, metrics::Registry& registry);
  ~RemoteBackend() override;

  // The current membership view (call on every change and about once a second: it also retries
  // broken load streams).
  void UpdateMembers(const std::vector<membership::Member>& members, absl::Time now);
  // Ends every load stream and waits for them (shutdown).
  void Stop();

  std::vector<ModelView> Models() const override;
  absl::StatusOr<engine::RequestId> Submit(const std::string& replica_id,
                                           engine::GenerateRequest request) override;
  void Cancel(const std::string& replica_id, engine::RequestId id) override;

  // Nodes with an open load stream (for tests and /status).
  int watched_nodes() const;

  class Peer;
  class RemoteCall;

 private:
  friend class Peer;
  friend class RemoteCall;
  void OnModels(const std::string& node_id, const exaserve::v1::DescribeModelsResponse& r);
  void ForgetCall(engine::RequestId id);
  // One channel per target for the process's life: a peer that leaves and comes back reuses it,
  // and channels are not torn down and rebuilt under churn (gRPC 1.51 has shown a double free
  // in its callback completion queue when a channel is destroyed and the next one created).
  std::shared_ptr<grpc::Channel> ChannelFor(const std::string& target);
  static constexpr size_t kMaxChannels = 4096;
  // The node hosting a remote replica, or "" when it is local or unknown.
  std::string NodeOf(const std::string& replica_id) const;
  void SetRoute(const std::string& replica_id, const std::string& node_id);
  void ClearRoute(const std::string& replica_id);

  const std::string self_node_id_;
  // This gateway's id in its dispatches and load streams (random, nonzero), so nodes can say
  // which of its dispatches a report counts (docs/architecture.md#load-on-change).
  const uint64_t dispatcher_;
  ReplicaBackend* const local_;
  router::ReplicaTable& table_;
  router::PrefixIndex& prefix_index_;  // remote replicas' entries; the daemon's (shared)
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);  // by node id
  std::map<std::string, ModelView> models_ ABSL_GUARDED_BY(mu_);             // by "name@version"
  std::map<engine::RequestId, std::shared_ptr<RemoteCall>> calls_ ABSL_GUARDED_BY(mu_);
  // Which node hosts each remote replica (from the load reports). A leaf lock: taken with or
  // without the others, never held while taking one.
  absl::Mutex channels_mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(channels_mu_);
  mutable absl::Mutex routes_mu_;
  std::map<std::string, std::string> replica_node_ ABSL_GUARDED_BY(routes_mu_);
  std::atomic<engine::RequestId> next_id_{1};
  std::atomic<int> reactors_open_{0};  // load watches and DescribeModels calls in flight
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  metrics::Counter& stream_breaks_;
  metrics::Counter& cache_resyncs_;
  metrics::Counter& remote_calls_;
  metrics::Counter& remote_failures_;
};

}  // namespace exa::gateway
