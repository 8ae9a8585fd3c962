// Proves the continuous-batching engine on a random model and on the sim backend: batching does
// not change greedy outputs, KV exhaustion preempts and still completes, cancellation frees every
// block, and admission enforces its limits with the right status codes.
#include <catch2/catch.hpp>

#include <random>

#include "common/strings.h"
#include "engine/engine.h"
#include "engine/step_executor.h"
#include "engine_test_util.h"
#include "test_models.h"

namespace exa::engine {
namespace {

using testing::AngleDetokenizer;
using testing::Collector;
using testing::SimOptions;

std::string Message(const absl::Status& s) { return std::string(ToStd(s.message())); }

std::vector<std::vector<int32_t>> RandomPrompts(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts(n);
  for (auto& p : prompts) {
    p.resize(3 + rng() % 40);
    for (auto& id : p) id = static_cast<int32_t>(3 + rng() % 90);
  }
  return prompts;
}

EngineOptions CpuOptions(const std::string& dir) {
  EngineOptions o;
  o.model_dir = dir;
  o.threads = 2;
  o.kv_cache_bytes = 4 << 20;
  return o;
}

GenerateRequest Greedy(const std::vector<int32_t>& prompt, int32_t max_tokens, Collector& c,
                       int key) {
  GenerateRequest r;
  r.prompt_tokens = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.callback = c.Callback(key);
  return r;
}

// Runs every prompt alone, one after another, on a fresh engine.
std::vector<std::vector<int32_t>> RunAlone(const EngineOptions& o,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           int32_t max_tokens) {
  Collector c;
  auto engine = CreateEngine(o);
  REQUIRE(engine.ok());
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE((*engine)->Submit(Greedy(prompts[i], max_tokens, c, static_cast<int>(i))).ok());
    REQUIRE(c.WaitFinished(static_cast<int>(i) + 1));
    out.push_back(c.Get(static_cast<int>(i)).tokens);
  }
  return out;
}

std::vector<std::vector<int32_t>> RunTogether(Engine& engine,
                                              const std::vector<std::vector<int32_t>>& prompts,
                                              int32_t max_tokens) {
  Collector c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE(engine.Submit(Greedy(prompts[i], max_tokens, c, static_cast<int>(i))).ok());
  }
  REQUIRE(c.WaitFinished(static_cast<int>(prompts.size())));
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = c.Get(static_cast<int>(i));
    CHECK(r.reason == FinishReason::kLength);
    out.push_back(r.tokens);
  }
  return out;
}

TEST_CASE("32 concurrent greedy requests give the outputs each gives alone", "[engine]") {
  auto dir = testing::WriteRandomModel("batch", testing::SmallConfig(), DType::kBF16);
  const auto prompts = RandomPrompts(32, 11);
  const auto alone = RunAlone(CpuOptions(dir.string()), prompts, 12);
  EngineOptions o = CpuOptions(dir.string());
  o.max_batch_tokens = 48;  // forces chunked prefill mixed with decodes
  auto engine = CreateEngine(o);
  REQUIRE(engine.ok());
  const auto together = RunTogether(**engine, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(together[i] == alone[i]);
    CHECK(together[i].size() == 12);
  }
  // The load snapshot is published after the step whose callbacks finished the requests.
  CHECK(testing::Eventually([&] { return (*engine)->Load().kv_blocks_used == 0; }));
}

TEST_CASE("KV cache exhaustion preempts, recomputes and still completes", "[engine]") {
  auto dir = testing::WriteRandomModel("preempt");
  const auto prompts = RandomPrompts(8, 5);
  const auto alone = RunAlone(CpuOptions(dir.string()), prompts, 40);
  EngineOptions o = CpuOptions(dir.string());
  // 6 blocks of 16 tokens: each request (<= 43 + 40 tokens) fits alone, 8 at once cannot.
  auto config = LoadModelConfig(dir.string());
  o.kv_cache_bytes = 6 * 16 * config->KvBytesPerToken();
  auto engine = CreateEngine(o);
  REQUIRE(engine.ok());
  REQUIRE((*engine)->info().kv_blocks_total == 6);
  const auto together = RunTogether(**engine, prompts, 40);
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(together[i] == alone[i]);
  }
  CHECK(testing::Eventually([&] {
    EngineLoad load = (*engine)->Load();
    return load.kv_blocks_used == 0 && load.running == 0;
  }));
  CHECK((*engine)->Load().preemptions > 0);
}

// Prompts that share prefixes the way real traffic does: a few system prompts of 0 to 70 tokens
// (some a whole number of 16-token blocks) with varied tails, and some prompts sent twice.
std::vector<std::vector<int32_t>> SharedPrefixPrompts(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> systems = {{}, {}, {}};
  for (auto& s : systems) {
    s.resize(rng() % 71);
    for (auto& id : s) id = static_cast<int32_t>(3 + rng() % 90);
  }
  systems.push_back(std::vector<int32_t>(32, 7));  // exactly two blocks
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    if (i > 0 && rng() % 5 == 0) {
      prompts.push_back(prompts[rng() % prompts.size()]);  // a repeat: all but its last token hit
      continue;
    }
    std::vector<int32_t> p = systems[rng() % systems.size()];
    const int tail = 1 + static_cast<int>(rng() % 20);
    for (int t = 0; t < tail; ++t) p.push_back(static_cast<int32_t>(3 + rng() % 90));
    prompts.push_back(std::move(p));
  }
  return prompts;
}

TEST_CASE(
    "prefix cache: greedy outputs are identical with the cache on and off, with "
    "preemptions and cancellations mixed in",
    "[engine][prefix]") {
  auto dir = testing::WriteRandomModel("prefix");
  const auto prompts = SharedPrefixPrompts(24, 3);
  EngineOptions off = CpuOptions(dir.string());
  off.prefix_cache.enabled = false;
  const auto expected = RunAlone(off, prompts, 24);

  EngineOptions on = CpuOptions(dir.string());
  on.max_batch_tokens = 48;  // chunked prefill
  auto config = LoadModelConfig(dir.string());
  on.kv_cache_bytes = 14 * 16 * config->KvBytesPerToken();  // too few blocks: preemptions
  auto engine = CreateEngine(on);
  REQUIRE(engine.ok());
  // Cancelled requests share the prefixes too: their blocks must not be freed from under others.
  Collector c;
  std::vector<RequestId> cancel;
  for (size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE((*engine)->Submit(Greedy(prompts[i], 24, c, static_cast<int>(i))).ok());
    if (i % 6 == 5) {
      auto id = (*engine)->Submit(Greedy(prompts[i], 100, c, 1000 + static_cast<int>(i)));
      REQUIRE(id.ok());
      cancel.push_back(*id);
    }
  }
  REQUIRE(c.WaitTokens(1005, 2));
  for (RequestId id : cancel) (*engine)->Cancel(id);
  REQUIRE(c.WaitFinished(static_cast<int>(prompts.size() + cancel.size())));
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(c.Get(static_cast<int>(i)).tokens == expected[i]);
  }
  // Alone, one after another, every repeat and shared system prompt hits.
  const auto again = RunAlone(on, prompts, 24);
  CHECK(again == expected);
  CHECK(testing::Eventually([&] {
    EngineLoad load = (*engine)->Load();
    return load.kv_blocks_used == 0 && load.running == 0;
  }));
  const EngineLoad load = (*engine)->Load();
  CHECK(load.preemptions > 0);
  CHECK(load.prefix_hit_tokens > 0);
  CHECK(load.kv_blocks_cached > 0);
}

TEST_CASE(
    "prefix cache: a repeated prompt prefills only its last token; another salt shares "
    "nothing",
    "[engine][prefix]") {
  auto dir = testing::WriteRandomModel("prefix-salt");
  auto engine = CreateEngine(CpuOptions(dir.string()));
  REQUIRE(engine.ok());
  std::vector<int32_t> prompt(48);
  for (int i = 0; i < 48; ++i) prompt[i] = 3 + i;
  Collector c;
  REQUIRE((*engine)->Submit(Greedy(prompt, 4, c, 0)).ok());
  REQUIRE(c.WaitFinished(1));
  REQUIRE(testing::Eventually([&] { return (*engine)->Load().prefix_miss_tokens == 48; }));
  REQUIRE((*engine)->Submit(Greedy(prompt, 4, c, 1)).ok());
  REQUIRE(c.WaitFinished(2));
  CHECK(c.Get(1).tokens == c.Get(0).tokens);
  REQUIRE(testing::Eventually([&] { return (*engine)->Load().prefix_miss_tokens == 48 + 16; }));
  CHECK((*engine)->Load().prefix_hit_tokens == 32);  // all full blocks but the last token's
  GenerateRequest salted = Greedy(prompt, 4, c, 2);
  salted.cache_salt = "tenant-b";
  REQUIRE((*engine)->Submit(salted).ok());
  REQUIRE(c.WaitFinished(3));
  CHECK(c.Get(2).tokens == c.Get(0).tokens);
  REQUIRE(
      testing::Eventually([&] { return (*engine)->Load().prefix_miss_tokens == 48 + 16 + 48; }));
  CHECK((*engine)->Load().prefix_hit_tokens == 32);
}

TEST_CASE("cancelling requests returns every KV block", "[engine]") {
  auto dir = testing::WriteRandomModel("cancel");
  Collector c;
  auto engine = CreateEngine(CpuOptions(dir.string()));
  REQUIRE(engine.ok());
  std::vector<RequestId> ids;
  for (int i = 0; i < 4; ++i) {
    auto id = (*engine)->Submit(Greedy(RandomPrompts(1, i)[0], 200, c, i));
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  REQUIRE(c.WaitTokens(3, 2));
  CHECK((*engine)->Load().kv_blocks_used > 0);
  for (RequestId id : ids) (*engine)->Cancel(id);
  REQUIRE(c.WaitFinished(4));
  for (int i = 0; i < 4; ++i) {
    CHECK(c.Get(i).reason == FinishReason::kCancelled);
    CHECK(c.Get(i).status.code() == absl::StatusCode::kCancelled);
  }
  CHECK(testing::Eventually([&] { return (*engine)->Load().kv_blocks_used == 0; }));
  CHECK((*engine)->Load().running == 0);
}

TEST_CASE("admission rejects what cannot be served, with both numbers", "[engine]") {
  auto dir = testing::WriteRandomModel("admit");
  Collector c;
  auto engine = CreateEngine(CpuOptions(dir.string()));
  REQUIRE(engine.ok());
  auto too_long = (*engine)->Submit(Greedy(std::vector<int32_t>(250, 5), 10, c, 0));
  REQUIRE(too_long.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(too_long.status()).find("250") != std::string::npos);
  CHECK(Message(too_long.status()).find("256") != std::string::npos);
  CHECK((*engine)->Submit(Greedy({}, 10, c, 1)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK((*engine)->Submit(Greedy({500}, 10, c, 2)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  GenerateRequest bad = Greedy({5, 6}, 4, c, 3);
  bad.sampling.top_p = 0.0f;
  CHECK((*engine)->Submit(bad).status().code() == absl::StatusCode::kInvalidArgument);
  (*engine)->Stop();
  CHECK((*engine)->Submit(Greedy({5, 6}, 4, c, 4)).status().code() ==
        absl::StatusCode::kUnavailable);
}

TEST_CASE("the same seed gives the same sampled output, batched or not", "[engine][sampler]") {
  auto dir = testing::WriteRandomModel("seed");
  Collector c;
  auto engine = CreateEngine(CpuOptions(dir.string()));
  REQUIRE(engine.ok());
  auto sampled = [&](uint64_t seed, int key) {
    GenerateRequest r = Greedy({7, 8, 9, 10}, 24, c, key);
    r.sampling.temperature = 1.5f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    r.sampling.logprobs = true;
    return r;
  };
  REQUIRE((*engine)->Submit(sampled(42, 0)).ok());
  REQUIRE(c.WaitFinished(1));
  for (int key = 1; key <= 3; ++key)
    REQUIRE((*engine)->Submit(sampled(key == 3 ? 43 : 42, key)).ok());
  REQUIRE(c.WaitFinished(4));
  CHECK(c.Get(1).tokens == c.Get(0).tokens);
  CHECK(c.Get(2).tokens == c.Get(0).tokens);
  CHECK(c.Get(3).tokens != c.Get(0).tokens);
  for (float lp : c.Get(0).logprobs) CHECK(lp <= 0.0f);
}

TEST_CASE("a request larger than the whole KV cache is a client error, naming both numbers",
          "[engine][sim]") {
  EngineOptions o = SimOptions();
  o.kv_cache_bytes = int64_t{32} << 20;  // 2 blocks at the sim's 13B-model bytes per token
  Collector c;
  auto engine = CreateEngine(o);
  REQUIRE(engine.ok());
  const int64_t capacity =
      int64_t{(*engine)->info().kv_blocks_total} * (*engine)->info().kv_block_size;
  REQUIRE(capacity + 2 <= (*engine)->info().max_context);  // the KV check, not the context's
  auto refused = (*engine)->Submit(Greedy({20, 21}, static_cast<int32_t>(capacity), c, 0));
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains(StrCat("exceeds the KV cache of ", capacity, " tokens")));
  (*engine)->Stop();
}

TEST_CASE("sim engine: deterministic tokens, stop tokens and stop strings", "[engine][sim]") {
  Collector c;
  auto engine = CreateEngine(SimOptions(), std::make_shared<AngleDetokenizer>());
  REQUIRE(engine.ok());
  const std::vector<int32_t> prompt = {20, 21, 22};
  REQUIRE((*engine)->Submit(Greedy(prompt, 6, c, 0)).ok());
  REQUIRE(c.WaitFinished(1));
  const auto base = c.Get(0);
  REQUIRE(base.tokens.size() == 6);
  CHECK(base.tokens[0] == SimExecutor::NextToken(22, 3, 1000));
  CHECK(base.text == StrCat("<", base.tokens[0], "><", base.tokens[1], "><", base.tokens[2], "><",
                            base.tokens[3], "><", base.tokens[4], "><", base.tokens[5], ">"));

  GenerateRequest stop_token = Greedy(prompt, 6, c, 1);
  stop_token.stop_token_ids = {base.tokens[2]};
  REQUIRE((*engine)->Submit(stop_token).ok());
  GenerateRequest stop_string = Greedy(prompt, 6, c, 2);
  stop_string.stop_strings = {StrCat("><", base.tokens[3])};
  REQUIRE((*engine)->Submit(stop_string).ok());
  REQUIRE(c.WaitFinished(3));
  CHECK(c.Get(1).tokens.size() == 3);
  CHECK(c.Get(1).reason == FinishReason::kStop);
  CHECK(c.Get(2).reason == FinishReason::kStop);
  CHECK(c.Get(2).text == StrCat("<", base.tokens[0], "><", base.tokens[1], "><", base.tokens[2]));
}

TEST_CASE("sim engine: ids chosen in the modeled device equal the host-sampled ones",
          "[engine][sim]") {
  // Greedy and seeded sampling take the on-device path (ids only, no logits); a repetition
  // penalty or log-probabilities take the host path (one-hot logits sampled here). The sim's
  // tokens do not depend on the path.
  Collector c;
  auto engine = CreateEngine(SimOptions(), std::make_shared<AngleDetokenizer>());
  REQUIRE(engine.ok());
  const std::vector<int32_t> prompt = {30, 31, 32, 33};
  REQUIRE((*engine)->Submit(Greedy(prompt, 8, c, 0)).ok());
  GenerateRequest sampled = Greedy(prompt, 8, c, 1);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_p = 0.8f;
  sampled.sampling.seed = 7;
  REQUIRE((*engine)->Submit(sampled).ok());
  GenerateRequest host = Greedy(prompt, 8, c, 2);
  host.sampling.temperature = 0.9f;
  host.sampling.repetition_penalty = 1.1f;
  host.sampling.logprobs = true;
  REQUIRE((*engine)->Submit(host).ok());
  REQUIRE(c.WaitFinished(3));
  REQUIRE(c.Get(0).tokens.size() == 8);
  CHECK(c.Get(0).tokens[0] == SimExecutor::NextToken(33, 4, 1000));
  CHECK(c.Get(1).tokens == c.Get(0).tokens);
  CHECK(c.Get(2).tokens == c.Get(0).tokens);
}

TEST_CASE("sim engine reports load and rejects when its queue is full", "[engine][sim]") {
  EngineOptions o = SimOptions();
  o.sim.decode_base_ms = 200;  // slow steps keep requests queued while we look
  o.max_queue = 2;
  o.max_running = 1;
  Collector c;
  auto engine = CreateEngine(o);
  REQUIRE(engine.ok());
  REQUIRE((*engine)->Submit(Greedy({20, 21}, 50, c, 0)).ok());
  REQUIRE(testing::Eventually([&] { return (*engine)->Load().running == 1; }));
  REQUIRE((*engine)->Submit(Greedy({20, 21}, 50, c, 1)).ok());
  REQUIRE((*engine)->Submit(Greedy({20, 21}, 50, c, 2)).ok());
  auto full = (*engine)->Submit(Greedy({20, 21}, 50, c, 3));
  CHECK(full.status().code() == absl::StatusCode::kResourceExhausted);
  EngineLoad load = (*engine)->Load();
  CHECK(load.waiting == 2);
  CHECK(load.pending_tokens >= 2 * 52);
  CHECK(load.kv_blocks_used == 1);
  (*engine)->Stop();
  REQUIRE(c.WaitFinished(3));
  CHECK(c.Get(2).reason == FinishReason::kCancelled);
}

TEST_CASE("a priority request (a health probe) passes a full queue and runs next",
          "[engine][sim]") {
  EngineOptions o = SimOptions();
  o.sim.decode_base_ms = 100;  // slow steps keep requests queued while we look
  o.max_queue = 2;
  o.max_running = 1;
  Collector c;
  auto engine = CreateEngine(o);
  REQUIRE(engine.ok());
  REQUIRE((*engine)->Submit(Greedy({20, 21}, 4, c, 0)).ok());
  REQUIRE(testing::Eventually([&] { return (*engine)->Load().running == 1; }));
  REQUIRE((*engine)->Submit(Greedy({20, 21}, 50, c, 1)).ok());
  REQUIRE((*engine)->Submit(Greedy({20, 21}, 50, c, 2)).ok());
  CHECK((*engine)->Submit(Greedy({20, 21}, 50, c, 3)).status().code() ==
        absl::StatusCode::kResourceExhausted);
  GenerateRequest probe = Greedy({20, 21}, 1, c, 4);
  probe.priority = true;
  REQUIRE((*engine)->Submit(std::move(probe)).ok());  // past the full queue
  REQUIRE(c.WaitFinished(2));                         // request 0, then the probe
  CHECK(c.Get(4).status.ok());
  CHECK(c.Get(4).tokens.size() == 1);
  CHECK(c.Get(1).tokens.size() <= 1);  // the probe went ahead of the waiting requests
  (*engine)->Stop();
}

}  // namespace
}  // namespace exa::engine
