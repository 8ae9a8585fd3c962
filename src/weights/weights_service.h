// exaserve.v1.Weights over a WeightsSource: ListModels, GetManifest, and FetchChunk as a server
// stream of at most 1 MiB messages, resumable from an offset. Storage-role nodes register it on
// their gRPC server (an origin over --origin-dir, a rack cache peer over its cache dir).
//
// Streams are bounded per client host and in total; a stream over either bound is refused with
// RESOURCE_EXHAUSTED at once (the fetcher backs off or tries its next tier), never queued.
//
// Threading: the synchronous gRPC API. A FetchChunk handler may block on a rack cache's upstream
// fetch, and the bounds above cap how many threads that can hold.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "exaserve/v1/weights.grpc.pb.h"
#include "metrics/registry.h"
#include "weights/source.h"

namespace exa::weights {

struct ServiceOptions {
  int max_streams_total = 256;
  int max_streams_per_client = 64;  // per client host: 8 pullers x 8 streams
  size_t message_bytes = 1 << 20;   // the API's bound; smaller only for tests
};

class WeightsService final : public exaserve::v1::Weights::Service {
 public:
  // `role` labels the metrics: "origin" or "rack-cache".
  WeightsService(WeightsSource& source, ServiceOptions options, metrics::Registry& registry,
                 std::string role);

  grpc::Status ListModels(grpc::ServerContext* context,
                          const exaserve::v1::ListModelsRequest* request,
                          exaserve::v1::ListModelsResponse* response) override;
  grpc::Status GetManifest(grpc::ServerContext* context,
                           const exaserve::v1::GetManifestRequest* request,
                           exaserve::v1::Manifest* response) override;
  grpc::Status FetchChunk(grpc::ServerContext* context,
                          const exaserve::v1::FetchChunkRequest* request,
                          grpc::ServerWriter<exaserve::v1::ChunkData>* writer) override;

  uint64_t served_bytes() const { return served_bytes_.load(); }
  int active_streams() const { return active_.load(); }

 private:
  bool Admit(const std::string& client);
  void Release(const std::string& client);

  WeightsSource& source_;
  const ServiceOptions options_;
  std::atomic<uint64_t> served_bytes_{0};
  std::atomic<int> active_{0};
  absl::Mutex mu_;
  std::map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
  metrics::Counter& served_bytes_metric_;
  metrics::Counter& chunks_served_metric_;
  metrics::Counter& rejected_metric_;
  metrics::Family<metrics::Counter>& errors_metric_;
};

// The host part of a gRPC peer string ("ipv4:10.0.0.1:5555" -> "10.0.0.1").
std::string PeerHost(const std::string& peer);

}  // namespace exa::weights
