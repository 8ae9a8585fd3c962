// The gRPC Inference.Generate stream and unary Complete for a model scaled to zero
// (docs/architecture.md#autoscaling): each waits at the gateway while a replica starts and then
// answers; past the activation timeout it ends UNAVAILABLE with `retry-after`; a client that
// leaves while it waits gives its place back.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>

#include "common/strings.h"
#include "fake_backend.h"
#include "gateway/inference_service.h"

namespace exa::gateway {
namespace {

struct Gateway {
  explicit Gateway(absl::Duration timeout) {
    options.activation.timeout = timeout;
    frontend = std::make_unique<Frontend>(options, backend, table, registry);
    frontend->activator().SetActivatable({"m"});
    service = std::make_unique<InferenceService>(*frontend);
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    REQUIRE(server);
    stub = exaserve::v1::Inference::NewStub(
        grpc::CreateChannel(StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  ~Gateway() { server->Shutdown(); }
  double Outcome(const std::string& outcome) {
    const std::string text = registry.Expose();
    const std::string key =
        StrCat("exaserve_gateway_activations_total{outcome=\"", outcome, "\"} ");
    auto at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }
  // Ticks the activator every 20 ms until `done`, at most `most`.
  template <typename Done>
  void TickUntil(Done done, std::chrono::milliseconds most = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + most;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      frontend->Tick(absl::Now());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  GatewayOptions options;
  metrics::Registry registry;
  AnsweringBackend backend;
  router::ReplicaTable table{router::Policy::kRoundRobin, 1};
  std::unique_ptr<Frontend> frontend;
  std::unique_ptr<InferenceService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<exaserve::v1::Inference::Stub> stub;
};

exaserve::v1::GenerateRequest Request() {
  exaserve::v1::GenerateRequest request;
  request.set_model("m");
  request.set_prompt("1+1=");
  request.set_max_tokens(4);
  return request;
}

TEST_CASE("A gRPC stream for a model at zero replicas waits for one, then streams") {
  Gateway g(absl::Seconds(30));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = g.stub->Generate(&context, Request());
  // Held: nothing routable yet. Then a replica becomes ready and the next tick resumes it.
  g.TickUntil([&] { return g.frontend->activator().Waiting(absl::Now()).size() == 1; });
  g.TickUntil([] { return false; }, std::chrono::milliseconds(300));
  CHECK(g.Outcome("served") == 0);
  CHECK(g.frontend->activator().Waiting(absl::Now()).size() == 1);
  g.table.Upsert({"n1/m@v1#0", "m", "v1", {}});
  g.table.Report("n1/m@v1#0", {0, 0, true});
  g.TickUntil([&] { return g.Outcome("served") == 1; });
  std::string text;
  exaserve::v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) text += chunk.text();
  grpc::Status status = reader->Finish();
  CHECK(status.ok());
  CHECK(text == "2");
}

TEST_CASE("Past the activation timeout the held stream ends UNAVAILABLE with retry-after") {
  Gateway g(absl::Milliseconds(200));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = g.stub->Generate(&context, Request());
  g.TickUntil([&] { return g.Outcome("timeout") == 1; });
  exaserve::v1::GenerateResponse chunk;
  CHECK_FALSE(reader->Read(&chunk));
  grpc::Status status = reader->Finish();
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(status.error_message(), Catch::Contains("gateway.activation_timeout"));
  CHECK(context.GetServerTrailingMetadata().count("retry-after") == 1);
}

TEST_CASE("A client that leaves while its stream is held gives its place back") {
  Gateway g(absl::Seconds(30));
  {
    grpc::ClientContext context;
    auto reader = g.stub->Generate(&context, Request());
    g.TickUntil([&] { return g.frontend->activator().Waiting(absl::Now()).size() == 1; });
    context.TryCancel();
    exaserve::v1::GenerateResponse chunk;
    CHECK_FALSE(reader->Read(&chunk));
    CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
  }
  g.TickUntil([&] { return g.Outcome("gone") == 1; });
  CHECK(g.Outcome("gone") == 1);
  CHECK(g.Outcome("served") == 0);
}

// A unary Complete issued on its own thread; `Wait` gives its status once it returned.
struct AsyncComplete {
  AsyncComplete(Gateway& g, std::chrono::seconds deadline) {
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    thread = std::thread([&g, this] { status = g.stub->Complete(&context, Request(), &response); });
  }
  ~AsyncComplete() {
    if (thread.joinable()) thread.join();
  }
  grpc::Status Wait() {
    thread.join();
    return status;
  }
  grpc::ClientContext context;
  exaserve::v1::CompleteResponse response;
  grpc::Status status;
  std::thread thread;
};

TEST_CASE("A unary Complete for a model at zero replicas waits for one, then answers") {
  Gateway g(absl::Seconds(30));
  AsyncComplete call(g, std::chrono::seconds(20));
  g.TickUntil([&] { return g.frontend->activator().Waiting(absl::Now()).size() == 1; });
  g.TickUntil([] { return false; }, std::chrono::milliseconds(300));
  CHECK(g.Outcome("served") == 0);
  g.table.Upsert({"n1/m@v1#0", "m", "v1", {}});
  g.table.Report("n1/m@v1#0", {0, 0, true});
  g.TickUntil([&] { return g.Outcome("served") == 1; });
  grpc::Status status = call.Wait();
  CHECK(status.ok());
  CHECK(call.response.text() == "2");
  CHECK(call.response.replica_id() == "n1/m@v1#0");
}

TEST_CASE("Past the activation timeout a held Complete ends UNAVAILABLE with retry-after") {
  Gateway g(absl::Milliseconds(200));
  AsyncComplete call(g, std::chrono::seconds(20));
  g.TickUntil([&] { return g.Outcome("timeout") == 1; });
  grpc::Status status = call.Wait();
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(status.error_message(), Catch::Contains("gateway.activation_timeout"));
  CHECK(call.context.GetServerTrailingMetadata().count("retry-after") == 1);
}

TEST_CASE("A Complete whose client leaves while held gives its place back") {
  Gateway g(absl::Seconds(30));
  {
    AsyncComplete call(g, std::chrono::seconds(20));
    g.TickUntil([&] { return g.frontend->activator().Waiting(absl::Now()).size() == 1; });
    call.context.TryCancel();
    CHECK(call.Wait().error_code() == grpc::StatusCode::CANCELLED);
  }
  g.TickUntil([&] { return g.Outcome("gone") == 1; });
  CHECK(g.Outcome("gone") == 1);
  CHECK(g.Outcome("served") == 0);
  // A replica that comes later serves no one.
  g.table.Upsert({"n1/m@v1#0", "m", "v1", {}});
  g.table.Report("n1/m@v1#0", {0, 0, true});
  g.TickUntil([] { return false; }, std::chrono::milliseconds(200));
  CHECK(g.Outcome("served") == 0);
}

}  // namespace
}  // namespace exa::gateway
