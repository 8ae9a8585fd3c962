// Proves the virtual-time sim replica times steps by the cost model (TTFT = prefill, then one
// token per decode step, a bigger batch a slightly longer step), reports load like the threaded
// engine, and frees its KV blocks on cancel, all without sleeping.
#include <catch2/catch.hpp>

#include "engine/sim_replica.h"
#include "engine_test_util.h"

namespace exa::engine {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

EngineOptions Options() {
  EngineOptions o;
  o.backend = "sim";
  o.kv_cache_bytes = int64_t{8} << 30;  // ~640 blocks of 16 tokens at 0.8 MB per token
  return o;
}

GenerateRequest Request(int32_t prompt, int32_t max_tokens, std::vector<absl::Time>* times) {
  GenerateRequest r;
  r.prompt_tokens.assign(prompt, 100);
  r.max_tokens = max_tokens;
  r.callback = [times](const StreamEvent& e) {
    if (e.token >= 0) times->push_back(e.time);
  };
  return r;
}

TEST_CASE("sim replica: prefill then one token per modeled decode step", "[engine][sim]") {
  EngineOptions o = Options();
  o.max_batch_tokens = 2048;  // the whole prompt in one prefill step
  auto replica = SimReplica::Create(o, kStart);
  REQUIRE(replica.ok());
  std::vector<absl::Time> times;
  REQUIRE((*replica)->Submit(Request(1000, 5, &times), kStart).ok());
  CHECK((*replica)->Load().pending_tokens == 1005);
  (*replica)->RunUntil(kStart + absl::Seconds(10));
  REQUIRE(times.size() == 5);
  const SimCostModel cost;
  // First token after the 1000-token prefill: 130 ms + 0.5 ms of attention context.
  CHECK(times[0] - kStart == cost.StepTime(1000, 0, 1000));
  CHECK(times[1] - times[0] == cost.StepTime(0, 1, 1001));
  CHECK(absl::ToDoubleMilliseconds(times[1] - times[0]) == Approx(20.6).epsilon(0.01));
  EngineLoad load = (*replica)->Load();
  CHECK(load.ttft_p50_ms == Approx(130.5).epsilon(0.01));
  CHECK(load.kv_blocks_used == 0);
  CHECK(load.running == 0);
  CHECK((*replica)->NextStepTime() == absl::InfiniteFuture());
}

TEST_CASE("sim replica: batching stretches the step a little, cancel frees", "[engine][sim]") {
  auto replica = SimReplica::Create(Options(), kStart);
  REQUIRE(replica.ok());
  std::vector<std::vector<absl::Time>> times(8);
  std::vector<RequestId> ids;
  for (int i = 0; i < 8; ++i) {
    auto id = (*replica)->Submit(Request(10, 100, &times[i]), kStart);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  (*replica)->RunUntil(kStart + absl::Milliseconds(500));
  REQUIRE(times[0].size() > 3);
  const double step_ms = absl::ToDoubleMilliseconds(times[0][3] - times[0][2]);
  CHECK(step_ms > 20.8);  // 20 ms + 8 x 0.1 ms + context
  CHECK(step_ms < 21.0);
  EngineLoad load = (*replica)->Load();
  CHECK(load.running == 8);
  CHECK(load.kv_blocks_used >= 16);  // 10 prompt + ~20 generated tokens: 2-3 blocks each
  for (RequestId id : ids) (*replica)->Cancel(id, kStart + absl::Milliseconds(600));
  CHECK((*replica)->Load().kv_blocks_used == 0);
  CHECK((*replica)->Load().running == 0);
}

TEST_CASE("sim replica: a directive fixes the output length; pending tokens learn from history",
          "[engine][sim][estimate]") {
  auto replica = SimReplica::Create(Options(), kStart);
  REQUIRE(replica.ok());
  std::vector<int32_t> finished;
  absl::Time now = kStart;
  auto submit = [&](int32_t output, int32_t max_tokens) {
    GenerateRequest r;
    r.prompt_tokens = SimOutputLengthDirective(output);
    r.prompt_tokens.resize(20, 100);
    r.max_tokens = max_tokens;
    r.callback = [&finished](const StreamEvent& e) {
      if (e.finished) finished.push_back(e.completion_tokens);
    };
    return (*replica)->Submit(std::move(r), now);
  };
  CHECK(SimExecutor::DirectedOutputLength(SimOutputLengthDirective(1234)) == 1234);
  CHECK(SimExecutor::DirectedOutputLength(std::vector<int32_t>{2, 3, 20, 20}) == 0);
  // Before any request finished, the estimate is the remaining max_tokens (20 prompt + 2000).
  REQUIRE(submit(50, 2000).ok());
  CHECK((*replica)->Load().pending_tokens == 2020);
  now += absl::Seconds(5);
  (*replica)->RunUntil(now);
  REQUIRE(finished == std::vector<int32_t>{50});  // the directive, not max_tokens, ended it
  // 16 requests (the history's minimum) of 50 tokens each: a new request is now expected to
  // produce 50, though it asks for 2000.
  for (int i = 0; i < 15; ++i) REQUIRE(submit(50, 2000).ok());
  now += absl::Seconds(10);
  (*replica)->RunUntil(now);
  REQUIRE(finished.size() == 16);
  CHECK((*replica)->Load().expected_output_tokens == Approx(50.0));
  REQUIRE(submit(50, 2000).ok());
  CHECK((*replica)->Load().pending_tokens == 20 + 50);
  // A max_tokens below the history caps the estimate; max_tokens still ends a longer output.
  // (Submitting runs the step due now: the first request's prefill, which samples its first
  // token, so it is 1 token to compute plus E[L - 1 | L > 1] = 49 to come.)
  REQUIRE(submit(500, 10).ok());
  CHECK((*replica)->Load().pending_tokens == (1 + 49) + (20 + 10));
  now += absl::Seconds(10);
  (*replica)->RunUntil(now);
  REQUIRE(finished.size() == 18);
  CHECK(finished[16] == 10);
  CHECK(finished[17] == 50);
}

TEST_CASE("sim replica: a failed step fails its requests; the load reports the error rate",
          "[engine][sim][errors]") {
  EngineOptions o = Options();
  o.sim.fail_every_steps = 4;
  auto replica = SimReplica::Create(o, kStart);
  REQUIRE(replica.ok());
  std::vector<FinishReason> reasons;
  absl::Time now = kStart;
  // One at a time, two tokens each (a prefill step that samples, then a decode step): steps 1-2
  // succeed, the request in steps 3-4 fails with step 4, steps 5-6 succeed.
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r;
    r.prompt_tokens.assign(10, 100);
    r.max_tokens = 2;
    r.callback = [&reasons](const StreamEvent& e) {
      if (e.finished) reasons.push_back(e.finish_reason);
    };
    REQUIRE((*replica)->Submit(std::move(r), now).ok());
    now += absl::Seconds(1);
    (*replica)->RunUntil(now);
  }
  REQUIRE(reasons.size() == 3);
  CHECK(reasons[0] == FinishReason::kLength);
  CHECK(reasons[1] == FinishReason::kError);
  CHECK(reasons[2] == FinishReason::kLength);
  EngineLoad load = (*replica)->Load();
  CHECK(load.recent_finished == 3);
  CHECK(load.error_rate == Approx(1.0 / 3));
  // A cancelled request is not an outcome of the replica's own.
  GenerateRequest r;
  r.prompt_tokens.assign(10, 100);
  r.max_tokens = 100;
  r.callback = [](const StreamEvent&) {};
  auto id = (*replica)->Submit(std::move(r), now);
  REQUIRE(id.ok());
  (*replica)->Cancel(*id, now + absl::Milliseconds(1));
  CHECK((*replica)->Load().recent_finished == 3);
}

TEST_CASE("sim replica: memory is its reservation; the leak drill adds what its steps keep",
          "[engine][sim][memory]") {
  EngineOptions o = Options();
  auto flat = SimReplica::Create(o, kStart);
  REQUIRE(flat.ok());
  CHECK((*flat)->Load().memory_bytes == o.kv_cache_bytes);
  o.sim.leak_bytes_per_step = int64_t{1} << 19;  // half a block of the drill's 1 MiB a step
  auto leaky = SimReplica::Create(o, kStart);
  REQUIRE(leaky.ok());
  std::vector<absl::Time> times;
  // One prefill step, then 9 decode steps: 10 steps keep 5 MiB.
  REQUIRE((*leaky)->Submit(Request(10, 10, &times), kStart).ok());
  (*leaky)->RunUntil(kStart + absl::Seconds(10));
  REQUIRE(times.size() == 10);
  CHECK((*leaky)->Load().memory_bytes == o.kv_cache_bytes + (int64_t{5} << 20));
}

}  // namespace
}  // namespace exa::engine
