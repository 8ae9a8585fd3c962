// Node.WatchLoad over real gRPC: the caller's max_rate_hz bounds the reports it gets (every
// caller once got the node's 10 Hz whatever it asked), and a rate that is none is refused,
// naming the field. Between the 10 Hz reports, PublishIfDue reports only when a replica's slots
// changed. Each report tells its gateway the last of its dispatches each replica admitted.
#include "node/node_service.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/strings.h"
#include "engine/rpc/generate_stream.h"
#include "net/grpc_server.h"
#include "node/bundled_model.h"

namespace exa::node {
namespace {

// `host`'s NodeService on a loopback gRPC server, every replica routable, and a stub to it.
struct Served {
  explicit Served(ReplicaHost& host)
      : service(
            "0123456789abcdef", host, [](const std::string&) { return true; },
            [](const std::string&) { return NodeService::NotRoutable{}; }, registry),
        server(Options()) {
    server.RegisterService(&service);
    REQUIRE(server.Start().ok());
    stub = exaserve::v1::Node::NewStub(grpc::CreateChannel(StrCat("127.0.0.1:", server.port()),
                                                           grpc::InsecureChannelCredentials()));
  }
  static net::GrpcServerOptions Options() {
    net::GrpcServerOptions so;
    so.bind_address = "127.0.0.1";
    so.port = 0;
    return so;
  }
  metrics::Registry registry;
  NodeService service;
  net::GrpcServer server;
  std::unique_ptr<exaserve::v1::Node::Stub> stub;
};

TEST_CASE("Sampling parameters cross the wire between gateway and node unchanged") {
  engine::SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.top_p = 0.8f;
  p.repetition_penalty = 1.05f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = -0.25f;
  p.logit_bias = {{3, -100.0f}, {17, 2.5f}};
  p.seed = 42;
  p.logprobs = true;
  p.top_logprobs = 3;
  exaserve::v1::SamplingParams wire;
  engine::rpc::SamplingToProto(p, &wire);
  const engine::SamplingParams back = engine::rpc::SamplingFromProto(wire);
  CHECK(back.temperature == p.temperature);
  CHECK(back.top_k == p.top_k);
  CHECK(back.top_p == p.top_p);
  CHECK(back.repetition_penalty == p.repetition_penalty);
  CHECK(back.presence_penalty == p.presence_penalty);
  CHECK(back.frequency_penalty == p.frequency_penalty);
  CHECK(back.logit_bias == p.logit_bias);
  CHECK(back.seed == p.seed);
  CHECK(back.logprobs);
  CHECK(back.top_logprobs == 3);
}

TEST_CASE("WatchLoad sends at most max_rate_hz reports; a rate that is none is refused") {
  InferenceOptions o;
  o.replicas_per_model = 0;  // no replicas: the reports are empty, their count is what counts
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  Served served(host);
  NodeService& service = served.service;
  auto& stub = served.stub;

  std::atomic<bool> stop{false};
  std::thread publisher([&] {  // the daemon's 10 Hz load timer
    while (!stop) {
      service.Publish();
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  // Reports received in 2 s, and how the stream ended.
  auto watch = [&](double hz) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    exaserve::v1::WatchLoadRequest request;
    request.set_max_rate_hz(hz);
    auto reader = stub->WatchLoad(&ctx, request);
    exaserve::v1::LoadReport report;
    int reports = 0;
    while (reader->Read(&report)) ++reports;
    return std::make_pair(reports, reader->Finish());
  };
  const auto [node_rate, s0] = watch(0);
  const auto [one_hz, s1] = watch(1);
  const auto [bad, s2] = watch(-1);
  stop = true;
  publisher.join();

  INFO("0 (the node's rate): " << node_rate << " reports; 1 Hz: " << one_hz);
  CHECK(node_rate >= 8);  // ~20 at 10 Hz; slow CI machines publish late, never early
  CHECK(one_hz >= 1);     // the snapshot a new watcher gets at once
  CHECK(one_hz <= 3);     // it and at most one a second after it
  CHECK(s0.error_code() == grpc::DEADLINE_EXCEEDED);
  CHECK(bad == 0);
  CHECK(s2.error_code() == grpc::INVALID_ARGUMENT);
  CHECK(s2.error_message() == "max_rate_hz: -1: 0 (the node's rate, 10 to 50 Hz) or at least 0.1");
  service.Stop();
  served.server.Shutdown(absl::Now());
  host.Stop();
}

TEST_CASE("PublishIfDue reports when a replica's sequences change, and when the last is old") {
  const std::string bundled = FindBundledModel();
  REQUIRE_FALSE(bundled.empty());
  InferenceOptions o;
  o.models = {bundled};
  o.backend = "sim";  // the 13B cost model in real time: each decode step takes ~20 ms
  o.replicas_per_model = 1;
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  REQUIRE(host.replicas().size() == 1);
  const std::string id = host.replicas()[0]->id;
  Served served(host);
  NodeService& service = served.service;
  auto& stub = served.stub;
  service.set_report_period(absl::Hours(1));  // only changes report, until the end

  // The watcher records each report's running + waiting sequences of the replica.
  absl::Mutex mu;
  std::vector<int64_t> seen;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  exaserve::v1::WatchLoadRequest request;
  request.set_max_rate_hz(0);
  auto reader = stub->WatchLoad(&ctx, request);
  std::thread watcher([&] {
    exaserve::v1::LoadReport report;
    while (reader->Read(&report)) {
      absl::MutexLock lock(&mu);
      for (const auto& r : report.replicas()) {
        if (r.replica_id() == id) seen.push_back(r.running_sequences() + r.waiting_sequences());
      }
    }
  });
  const auto reports = [&] {
    absl::MutexLock lock(&mu);
    return seen.size();
  };
  // Calls PublishIfDue at the daemon's 50 Hz until `done`, at most `most`.
  const auto tick_until = [&](auto done, absl::Duration most) {
    const absl::Time deadline = absl::Now() + most;
    while (!done() && absl::Now() < deadline) {
      service.PublishIfDue(absl::Now());
      absl::SleepFor(absl::Milliseconds(20));
    }
  };
  for (int i = 0; i < 500 && reports() == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  CHECK(reports() == 1);  // the snapshot a new watcher gets at once
  // The first call compares with nothing it published yet: one report at most.
  tick_until([] { return false; }, absl::Milliseconds(200));
  const size_t idle = reports();
  CHECK(idle <= 2);
  tick_until([] { return false; }, absl::Milliseconds(300));
  CHECK(reports() == idle);  // nothing changed: nothing sent

  engine::GenerateRequest r;
  r.prompt_tokens = {0, 5, 6, 5, 7};
  r.max_tokens = 20;
  r.ignore_eos = true;
  absl::Notification finished;
  r.callback = [&](const engine::StreamEvent& e) {
    if (e.finished) finished.Notify();
  };
  REQUIRE(host.FindEngine(id)->Submit(std::move(r)).ok());
  // The request came and went: a report saw it, and one after saw the replica empty again.
  tick_until(
      [&] {
        absl::MutexLock lock(&mu);
        return finished.HasBeenNotified() && !seen.empty() && seen.back() == 0 &&
               std::find(seen.begin(), seen.end(), 1) != seen.end();
      },
      absl::Seconds(20));
  {
    absl::MutexLock lock(&mu);
    std::string sequences;
    for (int64_t s : seen) sequences += StrCat(s, " ");
    INFO("sequences per report: " << sequences);
    CHECK(std::find(seen.begin(), seen.end(), 1) != seen.end());
    CHECK(seen.back() == 0);
    CHECK(seen.size() <= idle + 4);
  }
  // With nothing changing, the period alone reports: about 5 in 500 ms at 100 ms.
  service.set_report_period(absl::Milliseconds(100));
  const size_t before = reports();
  tick_until([] { return false; }, absl::Milliseconds(500));
  const size_t periodic = reports() - before;
  INFO("reports in 500 ms at a 100 ms period: " << periodic);
  CHECK(periodic >= 2);
  CHECK(periodic <= 7);
  ctx.TryCancel();
  watcher.join();
  service.Stop();
  served.server.Shutdown(absl::Now());
  host.Stop();
}

TEST_CASE("A load report tells each gateway which of its dispatches a replica admitted") {
  const std::string bundled = FindBundledModel();
  REQUIRE_FALSE(bundled.empty());
  InferenceOptions o;
  o.models = {bundled};
  o.backend = "sim";
  o.replicas_per_model = 1;
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  const std::string id = host.replicas().at(0)->id;
  Served served(host);
  NodeService& service = served.service;
  auto& stub = served.stub;

  // A gateway that names itself (dispatcher 7) and one that does not.
  struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<exaserve::v1::LoadReport>> reader;
    // The replica's entry of the next report.
    exaserve::v1::ReplicaLoad Next() {
      exaserve::v1::LoadReport report;
      REQUIRE(reader->Read(&report));
      REQUIRE(report.replicas_size() == 1);
      return report.replicas(0);
    }
  };
  const auto watch = [&](uint64_t dispatcher) {
    auto w = std::make_unique<Watch>();
    w->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    exaserve::v1::WatchLoadRequest request;
    request.set_dispatcher(dispatcher);
    w->reader = stub->WatchLoad(&w->ctx, request);
    return w;
  };
  auto named = watch(7);
  auto anonymous = watch(0);
  exaserve::v1::ReplicaLoad first = named->Next();
  CHECK(first.has_admitted_dispatch());
  CHECK(first.admitted_dispatch() == 0);  // nothing from it yet
  CHECK_FALSE(anonymous->Next().has_admitted_dispatch());

  // Dispatches 3, then 2 (overtaken on the way), from gateway 7, and 50 from another gateway.
  const auto generate = [&](uint64_t dispatcher, uint64_t dispatch) {
    grpc::ClientContext ctx;
    exaserve::v1::NodeGenerateRequest request;
    request.set_replica_id(id);
    request.mutable_request()->mutable_prompt_tokens()->add_ids(5);
    request.mutable_request()->set_max_tokens(1);
    request.set_dispatcher(dispatcher);
    request.set_dispatch(dispatch);
    auto reader = stub->Generate(&ctx, request);
    exaserve::v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  };
  REQUIRE(generate(7, 3).ok());
  REQUIRE(generate(7, 2).ok());
  REQUIRE(generate(9, 50).ok());
  service.Publish();
  CHECK(named->Next().admitted_dispatch() == 3);  // the highest of its own
  CHECK_FALSE(anonymous->Next().has_admitted_dispatch());

  named->ctx.TryCancel();
  anonymous->ctx.TryCancel();
  service.Stop();
  served.server.Shutdown(absl::Now());
  host.Stop();
}

}  // namespace
}  // namespace exa::node
