// Node.WatchLoad over real gRPC: the caller's max_rate_hz bounds the reports it gets (every
// caller once got the node's 10 Hz whatever it asked), and a rate that is none is refused,
// naming the field.
#include "node/node_service.h"

#include <atomic>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "net/grpc_server.h"

namespace exa::node {
namespace {

TEST_CASE("WatchLoad sends at most max_rate_hz reports; a rate that is none is refused") {
  InferenceOptions o;
  o.replicas_per_model = 0;  // no replicas: the reports are empty, their count is what counts
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  metrics::Registry registry;
  NodeService service(
      "0123456789abcdef", host, [](const std::string&) { return true; },
      [](const std::string&) { return NodeService::NotRoutable{}; }, registry);
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
  CHECK(s2.error_message() == "max_rate_hz: -1: 0 (the node's rate, 10 Hz) or at least 0.1");
  service.Stop();
  server.Shutdown(absl::Now());
  host.Stop();
}

}  // namespace
}  // namespace exa::node
