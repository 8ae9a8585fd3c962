// The cached-block report end to end: a CPU replica serving prompts with shared prefixes
// publishes its stored and evicted block hashes on Node.WatchLoad (real gRPC), and a gateway's
// index fed from the stream holds exactly the replica's set; malformed deltas from a peer are
// refused with the field named, never applied.
#include <atomic>
#include <cstdint>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "gateway/remote_backend.h"
#include "net/grpc_server.h"
#include "node/node_service.h"

namespace exa::gateway {
namespace {

TEST_CASE("cached-block deltas on WatchLoad keep a gateway's index equal to the replica's set",
          "[gateway][prefix]") {
  const std::string bundled = node::FindBundledModel();
  REQUIRE_FALSE(bundled.empty());
  node::InferenceOptions o;
  o.models = {bundled};
  o.backend = "cpu";
  o.threads = 1;
  o.kv_cache_bytes.value = 1 << 20;  // small: later prompts evict earlier blocks
  node::ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  REQUIRE(host.replicas().size() == 1);
  const std::string id = host.replicas()[0]->id;
  std::shared_ptr<engine::Engine> engine = host.FindEngine(id);
  REQUIRE(engine != nullptr);
  metrics::Registry registry;
  node::NodeService service(
      "0123456789abcdef", host, [](const std::string&) { return true; },
      [](const std::string&) { return node::NodeService::NotRoutable{}; }, registry);
  net::GrpcServerOptions so;
  so.bind_address = "127.0.0.1";
  so.port = 0;
  net::GrpcServer server(so);
  server.RegisterService(&service);
  REQUIRE(server.Start().ok());
  auto stub = exaserve::v1::Node::NewStub(
      grpc::CreateChannel(StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));

  std::atomic<bool> stop{false};
  std::thread publisher([&] {  // the daemon's 10 Hz load timer
    while (!stop) {
      service.Publish();
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  grpc::ClientContext ctx;
  auto reader = stub->WatchLoad(&ctx, exaserve::v1::WatchLoadRequest());
  router::PrefixIndex index;
  std::atomic<int> applied{0}, refused{0};
  std::thread gateway([&] {
    exaserve::v1::LoadReport report;
    while (reader->Read(&report)) {
      for (const auto& r : report.replicas()) {
        if (!r.has_cache_delta()) continue;
        auto d = PrefixCacheDeltaFromProto(r.cache_delta());
        if (d.ok() && index.Apply(r.replica_id(), *d) == router::PrefixIndex::Applied::kApplied) {
          ++applied;
        } else {
          ++refused;
        }
      }
    }
  });

  // Prompts sharing a 40-token system prompt, sent while the stream runs.
  std::vector<int32_t> system(40);
  for (int i = 0; i < 40; ++i) system[i] = 5 + i % 50;
  std::atomic<int> finished{0};
  for (int i = 0; i < 24; ++i) {
    engine::GenerateRequest r;
    r.prompt_tokens = system;
    for (int t = 0; t < 30; ++t) r.prompt_tokens.push_back(5 + (i * 7 + t * 3) % 50);
    r.max_tokens = 8;
    r.ignore_eos = true;
    r.callback = [&](const engine::StreamEvent& e) { finished += e.finished ? 1 : 0; };
    REQUIRE(engine->Submit(std::move(r)).ok());
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (finished < 24 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  REQUIRE(finished == 24);
  const engine::PrefixJournal* journal = engine->prefix_journal();
  REQUIRE(journal != nullptr);
  bool same = false;
  while (!same && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    same = index.State(id).cursor == journal->last_seq() && index.Holds(id, journal->Hashes());
  }
  CHECK(same);
  CHECK(journal->size() > 0);
  CHECK(engine->Load().kv_evictions > 0);
  CHECK(engine->Load().prefix_hit_tokens > 0);
  CHECK(refused == 0);
  CHECK(applied > 1);
  stop = true;
  publisher.join();
  ctx.TryCancel();
  gateway.join();
  service.Stop();
  server.Shutdown(absl::Now());
  host.Stop();
}

TEST_CASE("a malformed cached-block delta is refused, naming what is wrong", "[gateway][prefix]") {
  exaserve::v1::PrefixCacheDelta p;
  p.set_hashes(std::string(17, 'x'));
  auto d = PrefixCacheDeltaFromProto(p);
  CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(d.status().message()), Catch::Contains("a multiple of 8"));
  p.set_hashes(std::string(16, 'x'));
  CHECK_THAT(std::string(PrefixCacheDeltaFromProto(p).status().message()),
             Catch::Contains("0 bytes for 2 events; 1 expected"));
  p.set_evicted_bits(std::string(1, '\x02'));
  p.set_from_seq(UINT64_MAX);
  CHECK_THAT(std::string(PrefixCacheDeltaFromProto(p).status().message()),
             Catch::Contains("overflows"));
  p.set_from_seq(5);
  auto ok = PrefixCacheDeltaFromProto(p);
  REQUIRE(ok.ok());
  REQUIRE(ok->events.size() == 2);
  CHECK(ok->events[0].stored);
  CHECK_FALSE(ok->events[1].stored);  // bit 1 set: an eviction
  CHECK(ok->to == 7);
  p.set_snapshot(true);
  CHECK_THAT(std::string(PrefixCacheDeltaFromProto(p).status().message()),
             Catch::Contains("evicted_bits: set on a snapshot"));
  p.clear_evicted_bits();
  CHECK_THAT(std::string(PrefixCacheDeltaFromProto(p).status().message()),
             Catch::Contains("report_every_blocks: 0; expected 1-1024"));
  p.set_report_every_blocks(4);
  REQUIRE(PrefixCacheDeltaFromProto(p).ok());
  // A node that does not send the cap reports at a fixed stride.
  CHECK(PrefixCacheDeltaFromProto(p)->report == ReportSchedule{4, 4});
  p.set_report_max_every_blocks(70000);
  CHECK_THAT(std::string(PrefixCacheDeltaFromProto(p).status().message()),
             Catch::Contains("report_max_every_blocks: 70000; expected 0-65536"));
  p.set_report_max_every_blocks(100);
  CHECK(PrefixCacheDeltaFromProto(p)->report == ReportSchedule{4, 64});
  CHECK(PrefixCacheDeltaFromProto(p)->events[1].stored);  // a snapshot holds stored hashes
}

}  // namespace
}  // namespace exa::gateway
