// ReplicaHost: replicas spread over the node's GPUs; a replica whose engine cannot start fails
// alone; and the lifecycle StartReplica/StopReplica drive (pending → loading → warming → ready →
// draining → stopped), with the memory ledger refusing what does not fit.
#include "node/replica_host.h"

#include <catch2/catch.hpp>

#include <limits>

#include "absl/synchronization/notification.h"
#include "common/strings.h"
#include "unit/engine/engine_test_util.h"

namespace exa::node {
namespace {

std::string StateOf(const ReplicaHost& host, const std::string& id) {
  for (const ReplicaView& v : host.Views()) {
    if (v.id == id) return v.state;
  }
  return "";
}

bool WaitState(const ReplicaHost& host, const std::string& id, const std::string& state) {
  return engine::testing::Eventually([&] { return StateOf(host, id) == state; }, absl::Seconds(30));
}

TEST_CASE("replicas are spread over the configured GPUs, else over every GPU found", "[node]") {
  CHECK(AssignGpus(5, {}, 2) == std::vector<int>{0, 1, 0, 1, 0});
  CHECK(AssignGpus(4, {3, 5}, 8) == std::vector<int>{3, 5, 3, 5});  // the list wins
  CHECK(AssignGpus(3, {}, 0) == std::vector<int>{0, 0, 0});  // no inventory: GPU 0, fails there
  CHECK(AssignGpus(0, {1}, 2).empty());
}

TEST_CASE("the memory ledger refuses over-commit, naming the numbers", "[node]") {
  MemoryLedger ledger;
  ledger.SetCapacity(0, int64_t{80} << 30);
  REQUIRE(ledger.Reserve("weights:llama/gpu0", 0, int64_t{26} << 30).ok());
  REQUIRE(ledger.Reserve("r1", 0, int64_t{27} << 30).ok());
  absl::Status s = ledger.Reserve("r2", 0, int64_t{30} << 30);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(s.message()) ==
        "GPU 0: r2 needs 30Gi but only 27Gi of 80Gi are free (53Gi promised to other replicas)");
  CHECK(ledger.Reserve("r1", 0, 1).code() == absl::StatusCode::kAlreadyExists);
  CHECK(ledger.Release("r1") == int64_t{27} << 30);
  CHECK(ledger.Reserve("r2", 0, int64_t{30} << 30).ok());
  CHECK(ledger.used(0) == int64_t{56} << 30);
  // Device -1 (host) is not accounted unless given a capacity.
  CHECK(ledger.Reserve("cpu", -1, int64_t{1} << 40).ok());
  ledger.SetCapacity(1, int64_t{80} << 30);
  CHECK(ledger.BestFit({0, 1}, int64_t{10} << 30) == 1);  // the emptier GPU
  CHECK(ledger.BestFit({0, 1}, int64_t{90} << 30) == -1);
}

TEST_CASE("a replica that cannot start fails alone, with the CUDA reason", "[node]") {
  const std::string bundled = FindBundledModel();
  REQUIRE_FALSE(bundled.empty());
  InferenceOptions o;
  o.models = {bundled, bundled + "@v2"};
  o.replicas_per_model = 2;
  o.backend = "cuda";
  o.gpus = {"7"};  // no such GPU on any test machine with fewer than 8
  o.kv_cache_bytes.value = 8 << 20;
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());  // the node starts: a failed replica is not a failed node
  if (!host.replicas().empty()) {
    SUCCEED("this machine has 8+ GPUs: every replica started on GPU 7");
    return;
  }
  CHECK(host.models().empty());  // a model with no ready replica is not served
  const auto views = host.Views();
  REQUIRE(views.size() == 4);
  for (const ReplicaView& v : views) {
    INFO(v.id << ": " << v.reason);
    CHECK(v.state == "failed");
    CHECK(v.device == 7);
    CHECK(v.backend == "cuda");
    CHECK(v.reason.find("GPU 7: FAILED_PRECONDITION") == 0);
    CHECK(v.id.find("01234567/" + std::string(kBundledModelName)) == 0);
  }
  CHECK(views[2].version == "v2");
  CHECK(host.LedgerUsage(7).first == 0);  // a failed replica holds no memory
}

TEST_CASE("StartReplica and StopReplica: states, idempotence, the ledger, draining", "[node]") {
  const std::string bundled = FindBundledModel();
  REQUIRE_FALSE(bundled.empty());
  InferenceOptions o;
  o.models = {bundled};
  o.backend = "cpu";
  o.threads = 1;
  o.kv_cache_bytes.value = 8 << 20;
  o.host_memory_budget.value = 256 << 20;
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  REQUIRE(host.replicas().size() == 1);
  const auto [used_at_start, capacity] = host.LedgerUsage(-1);
  CHECK(capacity == 256 << 20);
  CHECK(used_at_start > 8 << 20);  // weights (once, with runtime) + the replica's KV cache

  ReplicaSpec spec;
  spec.model_dir = bundled;
  spec.version = "v2";
  spec.generation = 1;
  spec.labels = {{"track", "canary"}};
  auto started = host.StartReplica(spec);
  REQUIRE(started.ok());
  const std::string id = started->id;
  CHECK(id == "01234567/exa-tiny-arith@v2#0");
  CHECK((started->state == "pending" || started->state == "loading"));
  REQUIRE(WaitState(host, id, "ready"));
  CHECK(host.FindEngine(id) != nullptr);
  CHECK(host.FindModel("exa-tiny-arith", "v2") != nullptr);
  CHECK(host.LabelsOf(id).at("track") == "canary");
  CHECK(host.replicas().size() == 2);

  // The same (id, generation) again: its current view, nothing new.
  spec.replica_id = id;
  auto again = host.StartReplica(spec);
  REQUIRE(again.ok());
  CHECK(again->state == "ready");
  CHECK(host.replicas().size() == 2);
  // Another generation under the same id: refused until the replica is stopped.
  spec.generation = 2;
  auto other = host.StartReplica(spec);
  CHECK(other.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(other.status().message()).find("runs generation 1") != std::string::npos);
  // The same id and generation asking for another version or backend is not the same replica:
  // refused, naming what runs, rather than answered with the running one.
  spec.generation = 1;
  spec.version = "v3";
  auto conflict = host.StartReplica(spec);
  CHECK(conflict.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(std::string(conflict.status().message()).find("@v2 on cpu, not ") != std::string::npos);
  spec.version = "v2";
  spec.backend = "sim";
  CHECK(host.StartReplica(spec).status().code() == absl::StatusCode::kAlreadyExists);
  spec.backend = "";
  CHECK(host.StartReplica(spec).ok());  // the node's backend, cpu: the same replica again
  ReplicaSpec on_gpu = spec;
  on_gpu.replica_id = "";
  on_gpu.device = 1;
  auto device_refused = host.StartReplica(on_gpu);
  CHECK(device_refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(device_refused.status().message()).find("cuda backend only") !=
        std::string::npos);
  CHECK(host.replicas().size() == 2);

  // A tainted node (failed GPU burn-in) takes no new replica until the taint is lifted.
  host.SetRefusal("this node is tainted burn-in-failed: GPU 0 below its class");
  ReplicaSpec tainted = spec;
  tainted.replica_id = "";
  tainted.version = "v4";
  auto refused_tainted = host.StartReplica(tainted);
  CHECK(refused_tainted.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(refused_tainted.status().message()).find("burn-in-failed") !=
        std::string::npos);
  host.SetRefusal("");

  // Over-commit: refused before anything loads, with the numbers.
  ReplicaSpec big;
  big.model_dir = bundled;
  big.version = "v3";
  big.memory_budget_bytes = int64_t{1} << 30;
  auto refused = host.StartReplica(big);
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(refused.status().message()).find("host memory") == 0);
  CHECK(std::string(refused.status().message()).find("are free") != std::string::npos);

  // Bad input names the field.
  ReplicaSpec bad;
  CHECK(std::string(host.StartReplica(bad).status().message()).find("model_dir") == 0);
  bad.model_dir = bundled;
  bad.backend = "tpu";
  CHECK(std::string(host.StartReplica(bad).status().message()).find("backend") == 0);
  bad.backend = "";
  bad.model_dir = "/nonexistent";
  CHECK(host.StartReplica(bad).status().code() == absl::StatusCode::kInvalidArgument);
  // Sizes past any device once wrapped the ledger's sum: 2^63-1 was admitted on a 256 MiB host.
  ReplicaSpec huge;
  huge.model_dir = bundled;
  huge.version = "v5";
  huge.memory_budget_bytes = std::numeric_limits<int64_t>::max();
  CHECK(std::string(host.StartReplica(huge).status().message()) ==
        "memory_budget_bytes: 9223372036854775807: allowed 0 (the default) to 4Ti");
  huge.memory_budget_bytes = 0;
  huge.kv_cache_bytes = -1;
  CHECK(std::string(host.StartReplica(huge).status().message()).find("kv_cache_bytes: -1") == 0);
  // A budget under the KV cache the replica reserves: refused, not admitted at the budget.
  ReplicaSpec odd;
  odd.model_dir = bundled + std::string("\0/x", 3);
  CHECK(std::string(host.StartReplica(odd).status().message()) ==
        "model_dir: a path without control characters");
  odd.model_dir = bundled;
  for (int i = 0; i < 33; ++i) odd.labels[StrCat("k", i)] = "v";
  CHECK(std::string(host.StartReplica(odd).status().message()) ==
        "labels: 33; at most 32 per replica");
  huge.kv_cache_bytes = 0;
  huge.memory_budget_bytes = 1;
  CHECK(std::string(host.StartReplica(huge).status().message()) ==
        "memory_budget_bytes: 1 is less than the replica's KV cache (8Mi)");
  MemoryLedger ledger;
  ledger.SetCapacity(-1, int64_t{1} << 30);
  REQUIRE(ledger.Reserve("a", -1, int64_t{1} << 29).ok());
  CHECK(ledger.Reserve("b", -1, std::numeric_limits<int64_t>::max()).code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(ledger.used(-1) == int64_t{1} << 29);

  // Drain: a request admitted before the stop runs to completion.
  engine::testing::Collector c;
  engine::GenerateRequest r;
  r.prompt_tokens = {0, 5, 6, 5, 7};
  r.max_tokens = 48;
  r.ignore_eos = true;
  r.callback = c.Callback(0);
  REQUIRE(host.FindEngine(id)->Submit(std::move(r)).ok());
  auto stopping = host.StopReplica(id, /*drain=*/true);
  REQUIRE(stopping.ok());
  CHECK(stopping->state == "draining");
  CHECK(host.replicas().size() == 1);  // out of the serving set at once
  REQUIRE(c.WaitFinished(1));
  CHECK(c.Get(0).status.ok());
  CHECK(c.Get(0).tokens.size() == 48);
  REQUIRE(WaitState(host, id, "stopped"));
  CHECK(host.FindEngine(id) == nullptr);
  CHECK(host.LedgerUsage(-1).first == used_at_start);  // its KV budget is free again
  CHECK(host.StopReplica("no/such#0", true).status().code() == absl::StatusCode::kNotFound);

  // A stopped id can start again (a new generation), and an immediate stop cancels.
  spec.generation = 3;
  auto restarted = host.StartReplica(spec);
  REQUIRE(restarted.ok());
  REQUIRE(WaitState(host, id, "ready"));
  REQUIRE(host.StopReplica(id, /*drain=*/false).ok());
  REQUIRE(WaitState(host, id, "stopped"));
  host.Stop();
}

TEST_CASE("StageModel pulls once in the background, reports staged, retries a failure later",
          "[node]") {
  InferenceOptions o;
  o.backend = "sim";
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  host.set_stage_retry_after(absl::Milliseconds(200));
  CHECK_FALSE(host.pulls_models());
  CHECK(host.StageModel("m", "v1").status().code() == absl::StatusCode::kFailedPrecondition);
  absl::Mutex mu;
  int pulls = 0;
  bool fail_next = true;
  absl::Notification release;
  host.SetModelFetch(
      [&](const std::string& name, const std::string&) -> absl::StatusOr<std::string> {
        release.WaitForNotification();
        absl::MutexLock lock(&mu);
        ++pulls;
        if (name == "bad" && std::exchange(fail_next, false)) {
          return absl::UnavailableError("origin down");
        }
        return "/cache/" + name;
      });
  CHECK(host.pulls_models());
  auto first = host.StageModel("m", "v1");
  REQUIRE(first.ok());
  CHECK(first->first == "pulling");
  CHECK(host.StageModel("m", "v1")->first == "pulling");  // the same pull, not a second
  CHECK(host.StageModel("bad", "v1")->first == "pulling");
  CHECK(host.StageModel("../x", "v1").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(host.StageModel("m", "").status().code() == absl::StatusCode::kInvalidArgument);
  release.Notify();
  auto state_of = [&](const std::string& m) { return host.StageModel(m, "v1")->first; };
  for (int i = 0; i < 500 && state_of("m") != "staged"; ++i) absl::SleepFor(absl::Milliseconds(2));
  CHECK(state_of("m") == "staged");
  CHECK(host.StagedModels() == std::vector<std::string>{"m@v1"});
  // The failed one is pulled again by a call after the retry delay, and then staged.
  for (int i = 0; i < 500 && state_of("bad") != "staged"; ++i)
    absl::SleepFor(absl::Milliseconds(2));
  CHECK(state_of("bad") == "staged");
  absl::MutexLock lock(&mu);
  CHECK(pulls == 3);  // m once; bad twice
  host.Stop();
}

TEST_CASE("StartReplica by model name pulls first, then admits and loads", "[node]") {
  const std::string bundled = FindBundledModel();
  REQUIRE_FALSE(bundled.empty());
  InferenceOptions o;
  o.models = {bundled};
  o.backend = "cpu";
  o.threads = 1;
  o.kv_cache_bytes.value = 8 << 20;
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());
  ReplicaSpec spec;
  spec.model = "exa-tiny-arith";
  spec.version = "v9";
  // Without a fetcher a name cannot be resolved.
  CHECK(host.StartReplica(spec).status().code() == absl::StatusCode::kFailedPrecondition);
  std::vector<std::string> asked;
  absl::Mutex mu;
  host.SetModelFetch(
      [&](const std::string& name, const std::string& version) -> absl::StatusOr<std::string> {
        absl::MutexLock lock(&mu);
        asked.push_back(name + ":" + version);
        if (name == "missing")
          return absl::NotFoundError("model missing:" + version + " not found");
        return bundled;  // as if pulled into the node cache
      });
  auto started = host.StartReplica(spec);
  REQUIRE(started.ok());
  CHECK(started->id == "01234567/exa-tiny-arith@v9#0");
  REQUIRE(WaitState(host, started->id, "ready"));
  CHECK(host.FindModel("exa-tiny-arith", "v9") != nullptr);
  spec.model = "missing";
  auto missing = host.StartReplica(spec);
  REQUIRE(missing.ok());  // accepted: the pull fails in the background
  REQUIRE(WaitState(host, missing->id, "failed"));
  for (const ReplicaView& v : host.Views()) {
    if (v.id == missing->id) CHECK(v.reason == "NOT_FOUND: model missing:v9 not found");
  }
  spec.model = "../etc";
  CHECK(host.StartReplica(spec).status().code() == absl::StatusCode::kInvalidArgument);
  absl::MutexLock lock(&mu);
  CHECK(asked == std::vector<std::string>{"exa-tiny-arith:v9", "missing:v9"});
}

TEST_CASE("a model directory that cannot be read still fails the start, naming it", "[node]") {
  InferenceOptions o;
  o.models = {"/nonexistent/model"};
  o.backend = "cpu";
  ReplicaHost host("node", o);
  absl::Status s = host.Start();
  CHECK_FALSE(s.ok());
  CHECK(std::string(s.message()).find("/nonexistent/model") != std::string::npos);
}

}  // namespace
}  // namespace exa::node
