// Optimistic concurrency through exaserve.v1.Scheduler, in process: one scheduler (its own
// single-voter Raft log) behind a real gRPC server on a free port, driven as exaserve-cli does.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "common/strings.h"
#include "scheduler/scheduler_service.h"
#include "support/temp_dir.h"

namespace exa::scheduler {
namespace {

namespace pb = exaserve::v1;

std::string Spec(const std::string& name, int replicas, const std::string& metadata_extra = "") {
  return StrCat("apiVersion: exaserve.io/v1\nkind: InferenceReplica\nmetadata: {name: ", name,
                metadata_extra, "}\nspec:\n  model: llama-13b\n  replicas: ", replicas,
                "\n  resources: {gpu: 1, memory: 53Gi}\n");
}

class Scheduler {
 public:
  Scheduler() {
    SchedulerServiceOptions options;
    options.node_id = "s1";
    options.data_dir = dir_.path.string();
    options.tick = absl::Milliseconds(10);
    options.reconcile_interval = absl::Hours(1);  // no nodes to reconcile
    options.store.bootstrap_wait = absl::ZeroDuration();
    options.store.raft.election_timeout_ms = 100;  // a single voter: elected at once
    options.store.raft.heartbeat_timeout_ms = 20;
    SchedulerEnv env;
    env.members = [] {
      membership::Member self;
      self.id = "s1";
      self.address = "127.0.0.1:1";
      self.metadata.roles = {"scheduler"};
      return std::vector<membership::Member>{self};
    };
    env.is_scheduler = [](const membership::Member&) { return true; };
    auto service = SchedulerService::Open(options, env);
    REQUIRE(service.ok());
    service_ = std::move(*service);
    service_->Start();
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    REQUIRE(server_);
    stub_ = pb::Scheduler::NewStub(
        grpc::CreateChannel(StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    // Ready once a read index answers: the log has a leader that applied its barrier.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    pb::GetSpecsResponse specs;
    while (!Call(&pb::Scheduler::Stub::GetSpecs, pb::GetSpecsRequest(), &specs).ok()) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
  }
  ~Scheduler() {
    server_->Shutdown();
    service_->Stop();
  }

  template <typename Method, typename Request, typename Response>
  grpc::Status Call(Method method, const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ((*stub_).*method)(&context, request, response);
  }

  grpc::Status Apply(const std::string& yaml, std::optional<uint64_t> version = std::nullopt,
                     const std::string& name = "web") {
    pb::ApplyRequest request;
    request.set_yaml(yaml);
    request.set_source("web.yaml");
    if (version) (*request.mutable_resource_versions())[name] = *version;
    pb::ApplyResponse response;
    return Call(&pb::Scheduler::Stub::Apply, request, &response);
  }

  grpc::Status Delete(const std::string& name, std::optional<uint64_t> version) {
    pb::DeleteSpecRequest request;
    request.set_name(name);
    if (version) request.set_resource_version(*version);
    pb::DeleteSpecResponse response;
    return Call(&pb::Scheduler::Stub::DeleteSpec, request, &response);
  }

  // The stored spec `name` (resource_version 0 when absent).
  pb::StoredSpec Get(const std::string& name) {
    pb::GetSpecsRequest request;
    request.set_name(name);
    pb::GetSpecsResponse response;
    grpc::Status s = Call(&pb::Scheduler::Stub::GetSpecs, request, &response);
    if (!s.ok()) return {};
    REQUIRE(response.specs_size() == 1);
    return response.specs(0);
  }

 private:
  testing::TempDir dir_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pb::Scheduler::Stub> stub_;
};

TEST_CASE("apply and get show the resource version; a current one writes, a stale one aborts") {
  Scheduler s;
  REQUIRE(s.Apply(Spec("web", 2)).ok());
  const pb::StoredSpec first = s.Get("web");
  REQUIRE(first.resource_version() > 0);
  CHECK(first.version() == StrCat(first.resource_version()));

  pb::DescribeRequest describe;
  describe.set_name("web");
  pb::DescribeResponse described;
  REQUIRE(s.Call(&pb::Scheduler::Stub::Describe, describe, &described).ok());
  CHECK_THAT(described.json(),
             Catch::Contains(StrCat("\"resource_version\":", first.resource_version())));

  // The version read: written, and the version moves on.
  REQUIRE(s.Apply(Spec("web", 3), first.resource_version()).ok());
  const pb::StoredSpec second = s.Get("web");
  CHECK(second.resource_version() > first.resource_version());
  CHECK_THAT(second.yaml(), Catch::Contains("replicas: 3"));

  // The first version again, now stale: refused whole, both versions named, nothing written.
  grpc::Status stale = s.Apply(Spec("web", 4), first.resource_version());
  CHECK(stale.error_code() == grpc::ABORTED);
  CHECK_THAT(stale.error_message(), Catch::Contains("spec \"web\""));
  CHECK_THAT(stale.error_message(),
             Catch::Contains(StrCat("resource version ", first.resource_version(), " was named")));
  CHECK_THAT(stale.error_message(),
             Catch::Contains(StrCat("holds version ", second.resource_version())));
  CHECK(s.Get("web").resource_version() == second.resource_version());
  CHECK_THAT(s.Get("web").yaml(), Catch::Contains("replicas: 3"));

  // metadata.resourceVersion in the YAML (what `get -o yaml` prints) counts the same; it is not
  // part of the stored spec.
  grpc::Status in_yaml =
      s.Apply(Spec("web", 4, StrCat(", resourceVersion: ", first.resource_version())));
  CHECK(in_yaml.error_code() == grpc::ABORTED);
  REQUIRE(s.Apply(Spec("web", 4, StrCat(", resourceVersion: ", second.resource_version()))).ok());
  CHECK_THAT(s.Get("web").yaml(), !Catch::Contains("resourceVersion"));

  // Naming a version the YAML contradicts, or a spec it does not hold, is the caller's error.
  CHECK(s.Apply(Spec("web", 5, ", resourceVersion: 1"), 2).error_code() == grpc::INVALID_ARGUMENT);
  CHECK(s.Apply(Spec("web", 5), 1, "other").error_code() == grpc::INVALID_ARGUMENT);

  // Without a version the last writer wins, as before.
  CHECK(s.Apply(Spec("web", 6)).ok());
}

TEST_CASE("a version named for a missing spec, and 0 for an existing one, abort") {
  Scheduler s;
  grpc::Status missing = s.Apply(Spec("ghost", 1), 7, "ghost");
  CHECK(missing.error_code() == grpc::ABORTED);
  CHECK_THAT(missing.error_message(), Catch::Contains("spec \"ghost\": resource version 7"));
  CHECK_THAT(missing.error_message(), Catch::Contains("does not exist"));
  CHECK(s.Get("ghost").resource_version() == 0);

  // 0: create only.
  REQUIRE(s.Apply(Spec("ghost", 1), 0, "ghost").ok());
  grpc::Status exists = s.Apply(Spec("ghost", 2), 0, "ghost");
  CHECK(exists.error_code() == grpc::ABORTED);
  CHECK_THAT(exists.error_message(), Catch::Contains("must not exist"));
}

TEST_CASE("delete with a stale version is refused and the spec stays; the current one deletes") {
  Scheduler s;
  REQUIRE(s.Apply(Spec("web", 2)).ok());
  const uint64_t read = s.Get("web").resource_version();
  REQUIRE(s.Apply(Spec("web", 3)).ok());  // another writer, since
  const uint64_t now = s.Get("web").resource_version();

  grpc::Status stale = s.Delete("web", read);
  CHECK(stale.error_code() == grpc::ABORTED);
  CHECK_THAT(stale.error_message(), Catch::Contains(StrCat("resource version ", read)));
  CHECK_THAT(stale.error_message(), Catch::Contains(StrCat("holds version ", now)));
  CHECK(s.Get("web").resource_version() == now);

  REQUIRE(s.Delete("web", now).ok());
  CHECK(s.Get("web").resource_version() == 0);
  CHECK(s.Delete("web", now).error_code() == grpc::NOT_FOUND);
}

}  // namespace
}  // namespace exa::scheduler
