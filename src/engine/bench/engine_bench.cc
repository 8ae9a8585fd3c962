#include "engine/bench/engine_bench.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cuda/gpu.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/structured/json_schema.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer_detokenizer.h"

namespace exa::engine {
namespace {

using nlohmann::json;

// Timestamps of every streamed token, per request key.
class Recorder {
 public:
  StreamCallback Callback(int key) {
    return [this, key](const StreamEvent& e) {
      absl::MutexLock lock(&mu_);
      if (e.token >= 0) {
        times_[key].push_back(absl::Now());
        tokens_[key].push_back(e.token);
      }
      if (e.finished) ++finished_;
    };
  }
  bool Wait(int count) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return finished_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Minutes(10));
  }
  std::map<int, std::vector<absl::Time>> times() {
    absl::MutexLock lock(&mu_);
    return times_;
  }
  std::vector<int32_t> tokens(int key) {
    absl::MutexLock lock(&mu_);
    return tokens_[key];
  }

 private:
  absl::Mutex mu_;
  std::map<int, std::vector<absl::Time>> times_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<int32_t>> tokens_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
};

std::vector<int32_t> RandomPrompt(int32_t n, int32_t vocab, std::mt19937& rng) {
  std::vector<int32_t> p(n);
  for (auto& id : p) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return p;
}

GenerateRequest MakeRequest(std::vector<int32_t> prompt, int32_t max_tokens, StreamCallback cb,
                            std::shared_ptr<const structured::Grammar> grammar = nullptr,
                            const SamplingParams& sampling = {}) {
  GenerateRequest r;
  r.sampling = sampling;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.callback = std::move(cb);
  r.grammar = std::move(grammar);
  return r;
}

absl::StatusOr<json> MeasurePrefill(Engine& engine, int32_t tokens, std::mt19937& rng) {
  Recorder rec;
  const absl::Time start = absl::Now();
  EXA_RETURN_IF_ERROR(engine
                          .Submit(MakeRequest(RandomPrompt(tokens, engine.info().vocab_size, rng),
                                              1, rec.Callback(0)))
                          .status());
  if (!rec.Wait(1)) return absl::DeadlineExceededError("prefill did not finish");
  const double seconds = absl::ToDoubleSeconds(rec.times()[0].front() - start);
  return json{{"tokens", tokens}, {"seconds", seconds}, {"tokens_per_s", tokens / seconds}};
}

// Decode rate while all `batch` sequences are decoding: tokens streamed after the last sequence
// got its first token, over the time until the first sequence finished.
absl::StatusOr<json> MeasureDecode(Engine& engine, int32_t batch, int32_t decode_tokens,
                                   std::mt19937& rng,
                                   std::shared_ptr<const structured::Grammar> grammar = nullptr,
                                   float temperature = 0.0f) {
  Recorder rec;
  const EngineLoad before = engine.Load();
  for (int i = 0; i < batch; ++i) {
    SamplingParams sampling;
    sampling.temperature = temperature;
    sampling.seed = static_cast<uint64_t>(i) + 1;
    EXA_RETURN_IF_ERROR(engine
                            .Submit(MakeRequest(RandomPrompt(8, engine.info().vocab_size, rng),
                                                decode_tokens, rec.Callback(i), grammar, sampling))
                            .status());
  }
  if (!rec.Wait(batch)) return absl::DeadlineExceededError("decode did not finish");
  auto times = rec.times();
  absl::Time begin = absl::InfinitePast(), end = absl::InfiniteFuture();
  for (auto& [key, t] : times) {
    begin = std::max(begin, t.front());
    end = std::min(end, t.back());
  }
  int64_t tokens = 0;
  for (auto& [key, t] : times) {
    tokens +=
        std::count_if(t.begin(), t.end(), [&](absl::Time x) { return x > begin && x <= end; });
  }
  const double seconds = absl::ToDoubleSeconds(end - begin);
  if (seconds <= 0 || tokens == 0) return absl::InternalError("decode window is empty");
  // The engine thread's time per step over the whole run (prefill steps included): where a
  // step's milliseconds go when the device is not the limit.
  const EngineLoad after = engine.Load();
  const double steps = std::max<double>(1.0, static_cast<double>(after.steps - before.steps));
  auto per_step_ms = [&](double EngineLoad::*field) {
    return 1000.0 * (after.*field - before.*field) / steps;
  };
  return json{{"batch", batch},
              {"tokens", tokens},
              {"seconds", seconds},
              {"tokens_per_s", tokens / seconds},
              {"step_ms", 1000.0 * seconds * batch / tokens},
              {"engine_ms_per_step",
               {{"steps", after.steps - before.steps},
                {"schedule", per_step_ms(&EngineLoad::schedule_seconds)},
                {"execute", per_step_ms(&EngineLoad::execute_seconds)},
                {"device_wait", per_step_ms(&EngineLoad::device_wait_seconds)},
                {"complete", per_step_ms(&EngineLoad::complete_seconds)}}}};
}

absl::StatusOr<json> MeasureAccuracy(Engine& engine, const std::string& model_dir) {
  EXA_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromFile(model_dir + "/tokenizer.json"));
  std::ifstream in(model_dir + "/heldout-2digit.txt");
  if (!in) return absl::NotFoundError(StrCat(model_dir, "/heldout-2digit.txt: cannot open"));
  std::vector<std::pair<std::string, std::string>> cases;  // prompt, expected answer
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) cases.emplace_back(line.substr(0, eq + 1), line.substr(eq + 1));
  }
  Recorder rec;
  for (size_t i = 0; i < cases.size(); ++i) {
    GenerateRequest r =
        MakeRequest(tokenizer->Encode(cases[i].first, true), 6, rec.Callback(static_cast<int>(i)));
    r.ignore_eos = false;
    EXA_RETURN_IF_ERROR(engine.Submit(std::move(r)).status());
  }
  if (!rec.Wait(static_cast<int>(cases.size())))
    return absl::DeadlineExceededError("accuracy run did not finish");
  int exact = 0;
  json failures = json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string out = tokenizer->Decode(rec.tokens(static_cast<int>(i)), true);
    if (out == cases[i].second) {
      ++exact;
    } else if (failures.size() < 5) {
      failures.push_back(cases[i].first + out);
    }
  }
  const double n = static_cast<double>(std::max<size_t>(1, cases.size()));
  return json{{"cases", cases.size()},
              {"exact", exact},
              {"exact_match", exact / n},
              {"sample_failures", failures}};
}

// Bytes one decode step reads: every weight, except that only one row of an untied embedding
// table is touched.
absl::StatusOr<int64_t> WeightBytesPerToken(const std::string& model_dir) {
  EXA_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  EXA_ASSIGN_OR_RETURN(auto weights, ModelWeights::Load(model_dir, config));
  int64_t bytes = static_cast<int64_t>(weights->bytes());
  if (weights->lm_head().data != weights->embed_tokens().data) {
    bytes -= static_cast<int64_t>(weights->embed_tokens().bytes) -
             static_cast<int64_t>(weights->embed_tokens().bytes / config.vocab_size);
  }
  return bytes;
}

}  // namespace

double MeasureMemcpyBandwidth(int64_t bytes, int threads) {
  threads = std::max(1, threads);
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes), 0);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const absl::Time start = absl::Now();
    std::vector<std::thread> pool;
    const int64_t part = bytes / threads;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const int64_t n = t == threads - 1 ? bytes - t * part : part;
        std::memcpy(dst.data() + t * part, src.data() + t * part, static_cast<size_t>(n));
      });
    }
    for (auto& th : pool) th.join();
    best = std::max(best,
                    2.0 * static_cast<double>(bytes) / absl::ToDoubleSeconds(absl::Now() - start));
  }
  return best;
}

namespace {

// Decode bandwidth efficiency and the batch speedup, against `bandwidth` (bytes read + written
// per second) measured in the same run.
absl::Status AddEfficiency(const std::string& model_dir, double bandwidth, json& out) {
  EXA_ASSIGN_OR_RETURN(int64_t per_token, WeightBytesPerToken(model_dir));
  out["weight_bytes_per_token"] = per_token;
  for (const json& d : out["decode"]) {
    if (d["batch"] == 1) {
      out["decode_bw_efficiency"] = per_token * d["tokens_per_s"].get<double>() / bandwidth;
    }
  }
  if (out["decode"].size() > 1) {
    out["decode_speedup_largest_vs_first_batch"] =
        out["decode"].back()["tokens_per_s"].get<double>() /
        out["decode"][0]["tokens_per_s"].get<double>();
  }
  return absl::OkStatus();
}

// The GPU figures around the engine run: copy bandwidth baseline and the attention kernel alone
// at 2k and 8k context, with the model's head shape (Llama-3-8B's when the kernel cannot take it).
absl::Status AddGpuFigures(const EngineBenchOptions& o, json& out) {
  EXA_ASSIGN_OR_RETURN(double bw, cuda::MeasureDeviceCopyBandwidth(o.device, int64_t{1} << 30));
  out["device_copy_bandwidth_bytes_per_s"] = bw;
  EXA_RETURN_IF_ERROR(AddEfficiency(o.model_dir, bw, out));
  EXA_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(o.model_dir));
  int32_t heads = c.num_heads, kv_heads = c.num_kv_heads, dim = c.head_dim;
  if (dim % 8 != 0 || dim > 256 || heads / kv_heads > 16) heads = 32, kv_heads = 8, dim = 128;
  // cuBLAS alone on the model's linear shapes at the decode batch sizes: whether a slow step
  // is the GEMMs or the rest.
  out["gemm"] = json::array();
  const std::pair<int64_t, int64_t> shapes[] = {{c.q_dim(), c.hidden_size},
                                                {c.kv_dim(), c.hidden_size},
                                                {c.intermediate_size, c.hidden_size},
                                                {c.hidden_size, c.intermediate_size},
                                                {c.vocab_size, c.hidden_size}};
  for (int32_t rows : o.batch_sizes) {
    for (auto [n, k] : shapes) {
      EXA_ASSIGN_OR_RETURN(json g, cuda::MeasureGemm(o.device, rows, n, k));
      out["gemm"].push_back(g);
    }
  }
  out["paged_attention"] = json::array();
  for (int32_t context : {2048, 8192}) {
    EXA_ASSIGN_OR_RETURN(
        json a, cuda::MeasurePagedAttentionDecode(o.device, context, 16, heads, kv_heads, dim));
    out["paged_attention"].push_back(a);
  }
  return absl::OkStatus();
}

// Quantile q of `v` (sorted in place), nearest rank.
double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(rank, v.size() - 1)];
}

// The best of `repeats` rounds of `measure`, like the memcpy baseline (on a shared machine the best
// round is the one least disturbed by other processes), with the median rate beside it.
absl::StatusOr<json> BestOf(int32_t repeats, const std::function<absl::StatusOr<json>()>& measure) {
  json best;
  std::vector<double> rates;
  for (int32_t r = 0; r < std::max(1, repeats); ++r) {
    EXA_ASSIGN_OR_RETURN(json m, measure());
    rates.push_back(m["tokens_per_s"].get<double>());
    if (best.is_null() || rates.back() > best["tokens_per_s"].get<double>()) best = m;
  }
  best["tokens_per_s_median"] = Quantile(rates, 0.5);
  return best;
}

// The prompts one after another on `engine`: TTFT of each, and the prefill tokens it computed.
absl::StatusOr<json> MeasurePrefixRun(Engine& engine,
                                      const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<double> ttft_ms;
  const EngineLoad before = engine.Load();
  for (size_t i = 0; i < prompts.size(); ++i) {
    Recorder rec;
    const absl::Time start = absl::Now();
    EXA_RETURN_IF_ERROR(engine.Submit(MakeRequest(prompts[i], 1, rec.Callback(0))).status());
    if (!rec.Wait(1)) return absl::DeadlineExceededError("prefix-share request did not finish");
    ttft_ms.push_back(absl::ToDoubleMilliseconds(rec.times()[0].front() - start));
  }
  // The load is published after the step that finished the last request, which may be after
  // its callback: wait until every prompt token is counted as a hit or a miss (each prompt is
  // admitted once; the cache is large enough for no preemption).
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  EngineLoad after = engine.Load();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (after.prefix_hit_tokens + after.prefix_miss_tokens - before.prefix_hit_tokens -
                 before.prefix_miss_tokens <
             prompt_tokens &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
    after = engine.Load();
  }
  return json{{"requests", prompts.size()},
              {"ttft_p50_ms", Quantile(ttft_ms, 0.5)},
              {"ttft_p99_ms", Quantile(ttft_ms, 0.99)},
              {"prefill_tokens_computed", after.prefix_miss_tokens - before.prefix_miss_tokens},
              {"prefix_hit_tokens", after.prefix_hit_tokens - before.prefix_hit_tokens}};
}

// Same prompts, an engine with the prefix cache and one without, one after the other.
absl::StatusOr<json> RunPrefixShareBench(const EngineBenchOptions& o, EngineOptions eo) {
  const int32_t prompt = o.prefill_tokens.empty() ? 0 : o.prefill_tokens[0];
  if (o.prefix_share > 1 || o.prefix_requests < 2 || prompt < 2) {
    return absl::InvalidArgumentError(
        StrCat("--prefix-share ", o.prefix_share, " must be in [0, 1], --prefix-requests ",
               o.prefix_requests, " at least 2 and --prefill-tokens ", prompt, " at least 2"));
  }
  json out = {{"model", o.model_dir}, {"backend", o.backend}, {"prefix_share", o.prefix_share}};
  json runs;
  for (bool enabled : {true, false}) {
    eo.prefix_cache.enabled = enabled;
    EXA_ASSIGN_OR_RETURN(auto engine, CreateEngine(eo));
    const int32_t length = std::min(prompt, engine->info().max_context - 2);
    const auto shared = static_cast<int32_t>(o.prefix_share * length);
    std::mt19937 prompt_rng(7);  // the same prompts for both engines
    const std::vector<int32_t> system = RandomPrompt(shared, engine->info().vocab_size, prompt_rng);
    std::vector<std::vector<int32_t>> prompts;
    for (int32_t i = 0; i < o.prefix_requests; ++i) {
      std::vector<int32_t> p = system;
      const auto tail = RandomPrompt(length - shared, engine->info().vocab_size, prompt_rng);
      p.insert(p.end(), tail.begin(), tail.end());
      prompts.push_back(std::move(p));
    }
    EXA_ASSIGN_OR_RETURN(runs[enabled ? "on" : "off"], MeasurePrefixRun(*engine, prompts));
    out["prompt_tokens"] = length;
    out["shared_tokens"] = shared;
  }
  const auto ratio = [&](const char* field) {
    const double on = runs["on"][field].get<double>();
    return on > 0 ? runs["off"][field].get<double>() / on : 0.0;
  };
  runs["ratio"] = {{"prefill_tokens_off_over_on", ratio("prefill_tokens_computed")},
                   {"ttft_p50_off_over_on", ratio("ttft_p50_ms")},
                   {"prefill_tokens_reduction",
                    1.0 - runs["on"]["prefill_tokens_computed"].get<double>() /
                              std::max(1.0, runs["off"]["prefill_tokens_computed"].get<double>())}};
  out["prefix_cache"] = runs;
  return out;
}

// prefill[] per prompt length and decode[] per batch size, each the best of o.repeats rounds.
absl::Status MeasureThroughput(Engine& engine, const EngineBenchOptions& o, json& out) {
  std::mt19937 rng(1);
  // One untimed prefill first, as llama-bench's warm-up run: the first pass over the weights pays
  // their page faults and the pool's first wake-ups, which would land on the first figure.
  if (!o.prefill_tokens.empty()) {
    const int32_t first = std::min(o.prefill_tokens.front(), engine.info().max_context - 2);
    EXA_RETURN_IF_ERROR(MeasurePrefill(engine, first, rng).status());
  }
  out["prefill"] = json::array();
  for (int32_t length : o.prefill_tokens) {
    const int32_t prefill = std::min(length, engine.info().max_context - 2);
    EXA_ASSIGN_OR_RETURN(json p,
                         BestOf(o.repeats, [&] { return MeasurePrefill(engine, prefill, rng); }));
    out["prefill"].push_back(p);
  }
  out["decode"] = json::array();
  for (int32_t batch : o.batch_sizes) {
    EXA_ASSIGN_OR_RETURN(json d, BestOf(o.repeats, [&] {
                           return MeasureDecode(engine, batch, o.decode_tokens, rng, nullptr,
                                                o.temperature);
                         }));
    out["decode"].push_back(d);
  }
  return absl::OkStatus();
}

// Decode with and without the schema, rounds interleaved: the same engine, the same moment.
absl::StatusOr<json> RunStructuredBench(const EngineBenchOptions& o, const EngineOptions& eo) {
  EXA_ASSIGN_OR_RETURN(auto detokenizer, LoadDetokenizer(o.model_dir));
  EXA_ASSIGN_OR_RETURN(auto grammar, structured::CompileJsonSchema(o.json_schema));
  // Timed before the engine exists: creating one builds the trie (engine/engine_core.cc).
  const absl::Time trie_start = absl::Now();
  detokenizer->token_trie();
  const double trie_build_ms = absl::ToDoubleMilliseconds(absl::Now() - trie_start);
  EXA_ASSIGN_OR_RETURN(auto engine, CreateEngine(eo, detokenizer));
  json out = {{"model", o.model_dir},
              {"backend", o.backend},
              {"json_schema", json::parse(o.json_schema)},
              {"decode_tokens", o.decode_tokens},
              {"repeats", o.repeats},
              {"token_trie_build_ms", trie_build_ms},
              {"decode", json::array()}};
  std::mt19937 rng(1);
  for (int32_t batch : o.batch_sizes) {
    std::vector<double> free_rates, held_rates;
    json held_best;
    for (int32_t r = 0; r < std::max(1, o.repeats); ++r) {
      EXA_ASSIGN_OR_RETURN(json f, MeasureDecode(*engine, batch, o.decode_tokens, rng));
      EXA_ASSIGN_OR_RETURN(json h, MeasureDecode(*engine, batch, o.decode_tokens, rng, grammar));
      free_rates.push_back(f["tokens_per_s"].get<double>());
      held_rates.push_back(h["tokens_per_s"].get<double>());
      if (held_best.is_null()) held_best = h;
    }
    const double free_median = Quantile(free_rates, 0.5);
    const double held_median = Quantile(held_rates, 0.5);
    out["decode"].push_back({{"batch", batch},
                             {"free_tokens_per_s_median", free_median},
                             {"structured_tokens_per_s_median", held_median},
                             {"structured_over_free", held_median / free_median},
                             {"structured_engine_ms_per_step", held_best["engine_ms_per_step"]}});
  }
  return out;
}

}  // namespace

absl::StatusOr<json> RunEngineBench(const EngineBenchOptions& o) {
  json warm_up;
  if (o.backend == "cuda") {
    // Before the engine: the first CUDA call of the process pays the context creation.
    EXA_ASSIGN_OR_RETURN(auto timings, cuda::WarmUpGpus());
    warm_up = cuda::ToJson(timings);
  }
  if (!o.isa.empty()) {
    const std::optional<cpu::Isa> isa = cpu::ParseIsa(o.isa);
    if (o.backend != "cpu" || !isa.has_value() || !cpu::ForceIsa(*isa)) {
      return absl::InvalidArgumentError(StrCat(
          "--isa ", o.isa, ": backend cpu only, one of scalar, avx2, avx512, avx512bf16 up to ",
          cpu::IsaName(cpu::DetectedIsa()), " on this CPU"));
    }
  }
  EngineOptions eo;
  eo.model_dir = o.model_dir;
  eo.backend = o.backend;
  eo.device = o.device;
  eo.threads = o.threads;
  eo.cpu_spin_us = o.cpu_spin_us;
  eo.cpu_bf16_activations = o.cpu_bf16_activations;
  eo.kv_cache_bytes = o.kv_cache_bytes;
  eo.max_running = std::max(64, *std::max_element(o.batch_sizes.begin(), o.batch_sizes.end()));
  const int32_t longest = o.prefill_tokens.empty()
                              ? 1
                              : *std::max_element(o.prefill_tokens.begin(), o.prefill_tokens.end());
  eo.max_batch_tokens = std::max(longest, 8 * eo.max_running);
  eo.max_queue = 2048;
  if (o.prefix_share >= 0) return RunPrefixShareBench(o, eo);
  if (!o.json_schema.empty()) return RunStructuredBench(o, eo);
  EXA_ASSIGN_OR_RETURN(auto engine, CreateEngine(eo));
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  json out = {{"model", o.model_dir},
              {"backend", o.backend},
              {"threads", threads},
              {"temperature", o.temperature},
              {"weight_bytes", engine->info().weight_bytes}};
  if (o.backend == "cpu") {
    out["cpu_isa"] = std::string(cpu::IsaName(cpu::ActiveIsa()));
    out["cpu_spin_us"] = o.cpu_spin_us;
    out["cpu_bf16_activations"] = o.cpu_bf16_activations;
  }
  EXA_RETURN_IF_ERROR(MeasureThroughput(*engine, o, out));
  out["repeats"] = o.repeats;
  if (o.backend == "cpu") {
    const double bw = MeasureMemcpyBandwidth(o.memcpy_bytes, threads);
    out["memcpy_bandwidth_bytes_per_s"] = bw;
    // The same run as bytes copied per second (what `mbw`-style tools print), for readers
    // used to that convention; decode_bw_efficiency stays against the read + write traffic.
    out["memcpy_copy_rate_bytes_per_s"] = bw / 2;
    EXA_RETURN_IF_ERROR(AddEfficiency(o.model_dir, bw, out));
  }
  if (o.backend == "cuda") {
    out["warm_up"] = warm_up;
    out["device"] = o.device;
    out["weight_load_seconds"] = engine->info().weight_load_seconds;
    EXA_RETURN_IF_ERROR(AddGpuFigures(o, out));
  }
  if (o.accuracy) {
    EXA_ASSIGN_OR_RETURN(out["accuracy"], MeasureAccuracy(*engine, o.model_dir));
  }
  out["kv_blocks_total"] = engine->info().kv_blocks_total;
  out["preemptions"] = engine->Load().preemptions;
  return out;
}

}  // namespace exa::engine
