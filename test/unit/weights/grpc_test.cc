// End to end over real gRPC on loopback: an origin and a rack cache peer serving
// exaserve.v1.Weights, and node fetchers pulling through them. Proves that a rack pulls a model
// from the origin once however many nodes pull at once, that a byte flipped in the peer's cache
// is caught and refetched from the origin, and that a pull survives the peer dying mid-pull.
#include <catch2/catch.hpp>

#include <thread>

#include "absl/synchronization/notification.h"

#include "metrics/registry.h"
#include "net/grpc_server.h"
#include "test_tiers.h"
#include "weights/fetcher.h"
#include "weights/layout.h"
#include "weights/model_cache.h"
#include "weights/publish.h"
#include "weights/rack_cache.h"
#include "weights/weights_service.h"

namespace exa::weights {
namespace {

using testing::TempDir;

std::unique_ptr<net::GrpcServer> Serve(grpc::Service* service) {
  net::GrpcServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  auto server = std::make_unique<net::GrpcServer>(o);
  server->RegisterService(service);
  REQUIRE(server->Start().ok());
  return server;
}

std::string Address(const net::GrpcServer& s) { return StrCat("127.0.0.1:", s.port()); }

struct Rack {
  TempDir tmp;
  Manifest manifest;
  metrics::Registry origin_registry, peer_registry;
  DirectorySource origin_source{(tmp.path / "origin").string()};
  WeightsService origin_service{origin_source, {}, origin_registry, "origin"};
  std::unique_ptr<net::GrpcServer> origin_server;
  std::unique_ptr<Tier> peer_upstream;
  std::unique_ptr<RackCache> cache;
  std::unique_ptr<WeightsService> peer_service;
  std::unique_ptr<net::GrpcServer> peer_server;

  Rack() {
    testing::WriteModelDir(tmp.path / "src", {300000, 70000});
    manifest =
        *PublishModel(tmp.path / "src", tmp.path / "origin", "m", "v1", {.chunk_bytes = 65536});
    origin_server = Serve(&origin_service);
    peer_upstream = MakeGrpcTier("origin", Address(*origin_server));
    cache = std::make_unique<RackCache>(RackCacheOptions{.root = (tmp.path / "rack").string()},
                                        *peer_upstream, peer_registry);
    REQUIRE(cache->Start().ok());
    peer_service = std::make_unique<WeightsService>(*cache, ServiceOptions{.message_bytes = 16384},
                                                    peer_registry, "rack-cache");
    peer_server = Serve(peer_service.get());
  }

  FetchOptions Node(const std::string& name, int parallel = 4) {
    FetchOptions o;
    o.cache_dir = (tmp.path / name).string();
    o.parallel = parallel;
    o.tier_timeout = absl::Seconds(5);
    o.tier_backoff = absl::Seconds(60);
    return o;
  }
  void ExpectVerified(const std::string& node) {
    auto report = VerifyModel(tmp.path / node, "m", "v1", 2);
    REQUIRE(report.ok());
    CHECK(report->bad.empty());
  }
};

TEST_CASE("Nodes pulling at once through the rack peer cost the origin one copy", "[weights]") {
  Rack rack;
  auto peer = MakeGrpcTier("rack-cache", Address(*rack.peer_server));
  auto origin = MakeGrpcTier("origin", Address(*rack.origin_server));
  constexpr int kNodes = 4;
  std::vector<std::thread> nodes;
  std::vector<absl::Status> results(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    nodes.emplace_back([&, i] {
      Fetcher fetcher({peer.get(), origin.get()}, rack.Node(StrCat("node", i)));
      results[i] = fetcher.Pull("m", "v1").status();
    });
  }
  for (auto& t : nodes) t.join();
  for (const auto& s : results) CHECK(s.ok());
  CHECK(rack.origin_service.served_bytes() == rack.manifest.TotalBytes());
  CHECK(rack.peer_service->served_bytes() == kNodes * rack.manifest.TotalBytes());
  for (int i = 0; i < kNodes; ++i) rack.ExpectVerified(StrCat("node", i));
  CHECK_THAT(rack.peer_registry.Expose(), Catch::Contains("exaserve_weights_cache_misses_total"));
}

TEST_CASE("A byte flipped in the peer's cached chunk is caught and refetched from the origin",
          "[weights]") {
  Rack rack;
  auto peer = MakeGrpcTier("rack-cache", Address(*rack.peer_server));
  auto origin = MakeGrpcTier("origin", Address(*rack.origin_server));
  REQUIRE(Fetcher({peer.get(), origin.get()}, rack.Node("warm")).Pull("m", "v1").ok());
  const ChunkRef& victim = rack.manifest.FindFile("model-00001.safetensors")->chunks[2];
  testing::FlipByte(rack.cache->ChunkPath(victim.sha256), 1234);
  uint64_t origin_before = rack.origin_service.served_bytes();

  metrics::Registry registry;
  FetchMetrics metrics(registry);
  auto r = Fetcher({peer.get(), origin.get()}, rack.Node("node"), &metrics).Pull("m", "v1");
  REQUIRE(r.ok());
  CHECK(r->corrupt_chunks == 1);
  CHECK(rack.origin_service.served_bytes() - origin_before == victim.size_bytes);
  CHECK(metrics.corrupt_chunks.Value() == 1);
  rack.ExpectVerified("node");

  // After a restart the peer re-checks what it serves: it finds the bad chunk itself, drops
  // it, and fetches a good copy, so the next node gets everything from the peer.
  rack.peer_server->Shutdown(absl::Now());
  metrics::Registry restarted_registry;
  RackCache restarted(RackCacheOptions{.root = (rack.tmp.path / "rack").string()},
                      *rack.peer_upstream, restarted_registry);
  REQUIRE(restarted.Start().ok());
  WeightsService restarted_service(restarted, {}, restarted_registry, "rack-cache");
  auto restarted_server = Serve(&restarted_service);
  auto peer2 = MakeGrpcTier("rack-cache", Address(*restarted_server));
  REQUIRE(Fetcher({peer2.get(), origin.get()}, rack.Node("node2")).Pull("m", "v1").ok());
  CHECK(restarted.stats().corrupt_local == 1);
  auto r3 = Fetcher({peer2.get(), origin.get()}, rack.Node("node3")).Pull("m", "v1");
  REQUIRE(r3.ok());
  CHECK(r3->corrupt_chunks == 0);
  CHECK(r3->bytes_by_tier[peer2->name()] == rack.manifest.TotalBytes());
  rack.ExpectVerified("node3");
}

TEST_CASE("The peer dies mid-pull: the pull completes from the origin", "[weights]") {
  Rack rack;
  auto peer = MakeGrpcTier("rack-cache", Address(*rack.peer_server));
  auto origin = MakeGrpcTier("origin", Address(*rack.origin_server));
  bool killed = false;
  Fetcher fetcher({peer.get(), origin.get()}, rack.Node("node", 1));
  // Progress is reported after the first verified chunk: the peer dies right there.
  auto r = fetcher.Pull("m", "v1", [&](const PullProgress& p) {
    if (!p.finished && !killed) {
      killed = true;
      rack.peer_server->Shutdown(absl::Now());
    }
  });
  REQUIRE(r.ok());
  CHECK(killed);
  CHECK(r->bytes_by_tier["origin " + Address(*rack.origin_server)] > 0);
  CHECK(r->bytes_by_tier["rack-cache " + Address(*rack.peer_server)] > 0);
  rack.ExpectVerified("node");
}

TEST_CASE("Streams over the per-client bound are refused at once, not queued", "[weights]") {
  TempDir tmp;
  testing::WriteModelDir(tmp.path / "src", {8192});
  REQUIRE(
      PublishModel(tmp.path / "src", tmp.path / "origin", "m", "v1", {.chunk_bytes = 4096}).ok());
  DirectorySource origin_source((tmp.path / "origin").string());
  testing::SourceTier upstream("origin", origin_source);
  absl::Notification release;
  upstream.on_fetch = [&](const ChunkKey&) { release.WaitForNotification(); };
  metrics::Registry registry;
  RackCache cache({.root = (tmp.path / "rack").string()}, upstream, registry);
  REQUIRE(cache.Start().ok());
  WeightsService service(cache, {.max_streams_total = 8, .max_streams_per_client = 1}, registry,
                         "rack-cache");
  auto server = Serve(&service);
  auto peer = MakeGrpcTier("rack-cache", Address(*server));
  auto sink = [](uint64_t, absl::Span<const std::string_view>) { return absl::OkStatus(); };
  // The first stream waits on the (held) upstream fetch and holds the client's only slot.
  absl::Status first;
  std::thread holder([&] {
    first = peer->FetchChunk({"m", "v1", "model-00001.safetensors", 0}, 0, 4096, absl::Seconds(10),
                             sink);
  });
  for (absl::Time deadline = absl::Now() + absl::Seconds(10);
       service.active_streams() == 0 && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::Status second =
      peer->FetchChunk({"m", "v1", "model-00001.safetensors", 1}, 0, 4096, absl::Seconds(10), sink);
  release.Notify();
  holder.join();
  CHECK(first.ok());
  CHECK(absl::IsResourceExhausted(second));
  CHECK_THAT(std::string(second.message()), Catch::Contains("1 per client"));
  CHECK_THAT(registry.Expose(),
             Catch::Contains("exaserve_weights_streams_rejected_total{role=\"rack-cache\"} 1"));
}

TEST_CASE("Bad requests get precise gRPC errors", "[weights]") {
  Rack rack;
  auto origin = MakeGrpcTier("origin", Address(*rack.origin_server));
  auto sink = [](uint64_t, absl::Span<const std::string_view>) { return absl::OkStatus(); };
  absl::Status s =
      origin->FetchChunk({"m", "v1", "../../etc/passwd", 0}, 0, 10, absl::Seconds(5), sink);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("must stay inside"));
  s = origin->FetchChunk({"m", "v1", "model-00001.safetensors", 99}, 0, 10, absl::Seconds(5), sink);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("has 5 chunks"));
  CHECK(absl::IsNotFound(origin->GetManifest("nope", "v1", absl::Seconds(5)).status()));
  // A client that believes the chunk is shorter sees the extra bytes refused.
  s = origin->FetchChunk({"m", "v1", "model-00001.safetensors", 0}, 0, 100, absl::Seconds(5), sink);
  CHECK(absl::IsDataLoss(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("100-byte chunk"));
  // Resuming from an offset past the chunk is OUT_OF_RANGE.
  s = origin->FetchChunk({"m", "v1", "model-00001.safetensors", 0}, 70000, 65536, absl::Seconds(5),
                         sink);
  CHECK(absl::IsOutOfRange(s));
  auto models = origin->ListModels(absl::Seconds(5));
  REQUIRE(models.ok());
  REQUIRE(models->size() == 1);
  CHECK((*models)[0].manifest_digest == ManifestDigest(rack.manifest));
}

}  // namespace
}  // namespace exa::weights
