// The gRPC Inference API over a key's rate limit (docs/reference/api.md#rate-limits): the call
// ends RESOURCE_EXHAUSTED with a message naming the limit and `retry-after` trailing metadata in
// whole seconds, at least 1; under the limit it is served as before.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/strings.h"
#include "fake_backend.h"
#include "gateway/inference_service.h"

namespace exa::gateway {
namespace {

TEST_CASE("Over the rate limit gRPC answers RESOURCE_EXHAUSTED with retry-after metadata") {
  const std::string limits =
      StrCat(std::filesystem::temp_directory_path().string(), "/grpc-limits-", ::getpid(), ".yaml");
  std::ofstream(limits) << "default: {requests_per_minute: 1}\n";
  GatewayOptions options;
  options.rate_limits_file = limits;
  metrics::Registry registry;
  AnsweringBackend backend;
  router::ReplicaTable table(router::Policy::kRoundRobin, 1);
  table.Upsert({"n1/m@v1#0", "m", "v1", {}});
  table.Report("n1/m@v1#0", {0, 0, true});
  Frontend frontend(options, backend, table, registry);
  REQUIRE(frontend.LoadApiKeys().ok());
  InferenceService service(frontend);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server);
  auto stub = exaserve::v1::Inference::NewStub(
      grpc::CreateChannel(StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  exaserve::v1::GenerateRequest request;
  request.set_prompt("1+1=");
  request.set_max_tokens(4);

  grpc::ClientContext first;
  exaserve::v1::CompleteResponse response;
  grpc::Status ok = stub->Complete(&first, request, &response);
  REQUIRE(ok.ok());
  CHECK(response.text() == "2");
  CHECK(first.GetServerTrailingMetadata().count("retry-after") == 0);

  for (bool stream : {false, true}) {
    INFO("streaming: " << stream);
    grpc::ClientContext context;
    grpc::Status refused;
    if (stream) {
      auto reader = stub->Generate(&context, request);
      exaserve::v1::GenerateResponse chunk;
      while (reader->Read(&chunk)) {
      }
      refused = reader->Finish();
    } else {
      refused = stub->Complete(&context, request, &response);
    }
    CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(refused.error_message().find("rate limit reached on requests per minute: limit 1") !=
          std::string::npos);
    const auto& trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find("retry-after");
    REQUIRE(it != trailers.end());
    const int seconds = std::stoi(std::string(it->second.data(), it->second.size()));
    CHECK(seconds >= 1);
    CHECK(seconds <= 61);
  }
  server->Shutdown();
  std::filesystem::remove(limits);
}

}  // namespace
}  // namespace exa::gateway
