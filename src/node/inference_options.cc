// The `inference` config section (inference_options.h): registered once, before parsing.
#include "node/inference_options.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "common/chars.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::node {
namespace {

std::string Positive(const int& v) { return v > 0 ? "" : StrCat(v, ": must be positive"); }

// inference.prefix_cache_* (docs/architecture.md#prefix-cache).
void RegisterPrefixCacheConfig(config::Schema& s, const std::string& p,
                               engine::PrefixCacheOptions* o) {
  s.Add(p + ".prefix_cache_enabled", &o->enabled,
        "reuse the KV blocks of prompt prefixes earlier requests computed");
  s.Add<double>(p + ".prefix_cache_max_cached_fraction", &o->max_cached_fraction,
                "share of the KV cache unreferenced cached blocks may hold", [](const double& v) {
                  return v >= 0 && v <= 1 ? std::string() : StrCat(v, ": must be in [0, 1]");
                });
  s.Add<int>(
      p + ".prefix_cache_report_every_blocks", &o->report.every_blocks,
      "report every this-many-th cached block near a chain's root to gateways (1-1024)",
      [](const int& v) { return v >= 1 && v <= 1024 ? "" : StrCat(v, ": expected 1-1024"); });
  s.Add<int>(
      p + ".prefix_cache_report_max_every_blocks", &o->report.max_every_blocks,
      "the widest reporting stride, reached deep in a chain (1-65536; rounded down to "
      "prefix_cache_report_every_blocks times a power of two)",
      [](const int& v) { return v >= 1 && v <= 65536 ? "" : StrCat(v, ": expected 1-65536"); });
}

// A served model name as clients type it in `model`, "Qwen/Qwen2-0.5B-Instruct" included; '@'
// and ':' separate a version, so they are not part of a name.
std::string ValidateServedName(const std::string& v) {
  if (v.empty()) return "";
  if (v.size() > 128 || !OnlyAlnumOr(v, "._-/")) {
    return StrCat("\"", v.substr(0, 80),
                  "\": 1 to 128 of letters, digits, '.', '_', '-', '/' (no '@' or ':', which "
                  "separate a version)");
  }
  return "";
}

// One entry of inference.models: DIR or DIR@VERSION, DIR a model directory with a config.json.
absl::Status ValidateModelSpec(const std::string& text) {
  const size_t at = text.rfind('@');
  const std::string dir = text.substr(0, at);
  const std::string version = at == std::string::npos ? "v1" : text.substr(at + 1);
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        StrCat("inference.models \"", text, "\": expected DIR or DIR@VERSION"));
  }
  if (version.empty() || version.size() > 64 || !OnlyAlnumOr(version, "._-")) {
    return absl::InvalidArgumentError(StrCat("inference.models \"", text, "\": version \"", version,
                                             "\": 1 to 64 of letters, digits, '.', '_', '-'"));
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        StrCat("model directory \"", dir, "\" (inference.models, --model): no such directory"));
  }
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json", ec)) {
    return absl::InvalidArgumentError(
        StrCat("model directory \"", dir,
               "\" (inference.models, --model): no config.json; expected a Hugging Face model "
               "directory (config.json, tokenizer.json, *.safetensors)"));
  }
  return absl::OkStatus();
}

// The sim backend's drill knobs (slow, failing, leaking and stalled replicas).
void RegisterSimDrillConfig(config::Schema& s, const std::string& p, InferenceOptions* o) {
  s.Add<double>(p + ".sim_slowdown", &o->sim_slowdown,
                "sim backend: factor on every modeled step time (a slow-replica drill)",
                [](const double& v) {
                  return v >= 1 && v <= 100 ? std::string() : StrCat(v, ": must be in [1, 100]");
                });
  s.Add<std::vector<std::string>>(
      p + ".sim_slow_versions", &o->sim_slow_versions,
      "sim backend: versions sim_slowdown applies to (a bad-release drill); empty: every replica");
  s.Add<int>(
      p + ".sim_fail_every_steps", &o->sim_fail_every_steps,
      "sim backend: every this-many-th step fails with the requests in it (a "
      "failing-release drill); 0: off",
      [](const int& v) { return v >= 0 && v <= 1024 ? "" : StrCat(v, ": expected 0-1024"); });
  s.Add<std::vector<std::string>>(
      p + ".sim_failing_versions", &o->sim_failing_versions,
      "sim backend: versions sim_fail_every_steps applies to; empty: every replica");
  s.Add(p + ".sim_leak_bytes_per_step", &o->sim_leak_bytes_per_step,
        "sim backend: every step keeps this many more bytes for good, up to 1 GiB (a "
        "leaking-release drill); 0: off");
  s.Add<std::vector<std::string>>(
      p + ".sim_leaking_versions", &o->sim_leaking_versions,
      "sim backend: versions sim_leak_bytes_per_step applies to; empty: every replica");
  s.Add(p + ".sim_stall_file", &o->sim_stall_file,
        "sim backend: while this file exists every step loop hangs (a drill); empty: off");
}

}  // namespace

absl::Status ValidateModels(const InferenceOptions& o) {
  for (const std::string& text : o.models) EXA_RETURN_IF_ERROR(ValidateModelSpec(text));
  if (!o.served_model_name.empty() && o.models.size() != 1) {
    return absl::InvalidArgumentError(StrCat("inference.served_model_name \"", o.served_model_name,
                                             "\" (--served-model-name) names one "
                                             "model; inference.models has ",
                                             o.models.size(), " (give exactly one --model)"));
  }
  return absl::OkStatus();
}

void RegisterConfig(config::Schema& s, std::string_view section, InferenceOptions* o) {
  std::string p(section);
  s.Add(p + ".models", &o->models,
        "model directories (HF layout), each DIR or DIR@VERSION; empty: the bundled model");
  s.Add<std::string>(p + ".served_model_name", &o->served_model_name,
                     "the name clients give in `model` for the one model in inference.models; "
                     "empty: the directory's name",
                     ValidateServedName);
  s.Add<int>(p + ".replicas_per_model", &o->replicas_per_model, "replicas of each model",
             [](const int& v) { return v >= 0 && v <= 64 ? "" : StrCat(v, ": expected 0-64"); });
  s.AddEnum(p + ".backend", &o->backend, {"cpu", "cuda", "sim"},
            "engine backend (cuda: replicas spread over inference.gpus; without a GPU a replica "
            "fails to start, with the reason, and the node keeps serving)");
  s.Add<std::vector<std::string>>(
      p + ".gpus", &o->gpus,
      "cuda backend: GPU indices replicas are spread over, round-robin; empty: every GPU found",
      [](const std::vector<std::string>& v) {
        for (const std::string& g : v) {
          int index = -1;
          if (!absl::SimpleAtoi(g, &index) || index < 0 || index > 255) {
            return StrCat("GPU index \"", g, "\": expected an integer 0-255");
          }
        }
        return std::string();
      });
  s.Add<double>(p + ".gpu_memory_utilization", &o->gpu_memory_utilization,
                "share of each GPU's memory the ledger may promise to replicas (weights, KV, "
                "runtime); the rest is headroom",
                [](const double& v) {
                  return v > 0 && v <= 1 ? std::string() : StrCat(v, ": must be in (0, 1]");
                });
  s.Add(p + ".host_memory_budget", &o->host_memory_budget,
        "host memory the ledger may promise to cpu/sim replicas; 0: not accounted");
  s.Add(p + ".burn_in", &o->burn_in,
        "cuda backend: GEMM and copy burn-in on every GPU at start; failing taints the node "
        "(burn-in-failed) and starts no replica");
  RegisterSimDrillConfig(s, p, o);
  s.Add<int>(
      p + ".threads", &o->threads, "CPU threads per replica; 0: one per hardware thread",
      [](const int& v) { return v >= 0 && v <= 1024 ? "" : StrCat(v, ": expected 0-1024"); });
  s.Add(p + ".cpu_bf16_activations", &o->cpu_bf16_activations,
        "cpu backend, bf16 weights: round activations to bf16 before each matrix product (the "
        "numerics of a bf16 model run in bf16; twice the fp32 rate on AVX512-BF16 CPUs); false: "
        "exact fp32 products");
  s.Add(p + ".kv_cache_bytes", &o->kv_cache_bytes, "KV cache per replica, reserved at start");
  s.Add<int>(p + ".max_batch_tokens", &o->max_batch_tokens, "tokens per engine step", Positive);
  s.Add<int>(p + ".max_running", &o->max_running, "sequences batched at once", Positive);
  s.Add<int>(p + ".max_queue", &o->max_queue,
             "requests waiting per replica; beyond this: RESOURCE_EXHAUSTED", Positive);
  RegisterPrefixCacheConfig(s, p, &o->prefix_cache);
}

}  // namespace exa::node
