// The daemon's weight distribution (docs/architecture.md#roles storage role,
// docs/architecture.md#flows Weights): builds the Weights service a storage node serves — an origin
// over --origin-dir, otherwise a rack cache over <cache_dir>/rack that fetches misses from
// weights.origin — and pre-stages the models listed in weights.prestage into the node cache at
// start (docs/architecture.md#cold-start), fetching from the rack's storage peer (found through
// membership) and then the origin.
//
// Thread safety: Start and Stop on the daemon's main thread; pre-staging runs on its own thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "daemon/options.h"
#include "membership/member.h"
#include "metrics/registry.h"

namespace grpc {
class Service;
}

namespace exa::weights {
class WeightsSource;
class RackCache;
class Tier;
class WeightsService;
struct FetchMetrics;
}  // namespace exa::weights

namespace exa::daemon {

// "host:grpc_port" of the storage peer of `rack` in `members` (alive, not `self_id`, serving
// gRPC, storage per `is_storage`); empty when there is none. The lowest node id wins, so every
// node of a rack picks the same peer.
std::string FindRackPeer(const std::vector<membership::Member>& members, const std::string& self_id,
                         const std::string& rack,
                         const std::function<bool(const membership::Member&)>& is_storage);

class WeightsRole {
 public:
  WeightsRole(const DaemonOptions& options, metrics::Registry& registry);
  ~WeightsRole();

  // Builds the service when `storage`; a storage node with neither --origin-dir nor
  // weights.origin has nothing to serve and logs why.
  absl::Status Start(bool storage);
  grpc::Service* service();  // null when not serving
  // Pulls weights.prestage in the background; `rack_peer` is asked for the peer's address.
  void StartPrestage(std::function<std::string()> rack_peer);
  // Pulls NAME:VERSION into the node cache (local → the rack's storage peer → weights.origin,
  // every chunk verified) and returns the model's directory there: what StartReplica loads from a
  // model name. Blocks for the pull; FAILED_PRECONDITION when no tier is configured.
  absl::StatusOr<std::string> PullModel(const std::string& name, const std::string& version,
                                        const std::function<std::string()>& rack_peer);
  // One small file of a model in the weights store (the rack peer, then the origin), every
  // chunk verified, without pulling the model: what the scheduler plans from (config.json).
  // NOT_FOUND when no tier has the model or the file; FAILED_PRECONDITION above `max_bytes`.
  struct ModelFile {
    std::string text;
    uint64_t checkpoint_bytes = 0;  // the model's *.safetensors, summed from its manifest
  };
  absl::StatusOr<ModelFile> ReadModelFile(const std::string& name, const std::string& version,
                                          const std::string& path, uint64_t max_bytes,
                                          const std::function<std::string()>& rack_peer);
  void Stop();

 private:
  void Prestage(const std::function<std::string()>& rack_peer);
  // The tiers a node pulls from, in order: the rack peer (waiting up to `wait` for membership
  // to name one), then the origin.
  std::vector<std::unique_ptr<weights::Tier>> PullTiers(
      const std::function<std::string()>& rack_peer, absl::Duration wait, std::string* peer_out);

  const DaemonOptions& options_;
  metrics::Registry& registry_;
  std::unique_ptr<weights::WeightsSource> origin_source_;
  std::unique_ptr<weights::Tier> upstream_;
  std::unique_ptr<weights::RackCache> rack_cache_;
  std::unique_ptr<weights::WeightsService> service_;
  std::unique_ptr<weights::FetchMetrics> fetch_metrics_;
  std::atomic<bool> stopping_{false};
  std::thread prestage_;
};

}  // namespace exa::daemon
