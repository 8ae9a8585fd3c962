#include "scheduler/memory_planner.h"

#include <algorithm>
#include <cmath>

#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "engine/model_config.h"
#include "fmt/format.h"
#include "scheduler/device_fit.h"
#include "scheduler/placement.h"
#include "scheduler/spec.h"

namespace exa::scheduler {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Preset {
  const char* name;
  const char* alias;
  int32_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  bool tied;
};

// From each model's published config.json.
constexpr Preset kPresets[] = {
    {"llama-2-7b", "llama-7b", 32000, 4096, 11008, 32, 32, 32, 128, false},
    {"llama-2-13b", "llama-13b", 32000, 5120, 13824, 40, 40, 40, 128, false},
    {"llama-2-70b", "llama-70b", 32000, 8192, 28672, 80, 64, 8, 128, false},
    {"llama-3-8b", "", 128256, 4096, 14336, 32, 32, 8, 128, false},
    {"llama-3-70b", "", 128256, 8192, 28672, 80, 64, 8, 128, false},
    {"mistral-7b", "", 32000, 4096, 14336, 32, 32, 8, 128, false},
};

ModelShape ShapeFromPreset(const Preset& p) {
  engine::ModelConfig c;
  c.vocab_size = p.vocab;
  c.hidden_size = p.hidden;
  c.intermediate_size = p.intermediate;
  c.num_layers = p.layers;
  c.num_heads = p.heads;
  c.num_kv_heads = p.kv_heads;
  c.head_dim = p.head_dim;
  c.tie_word_embeddings = p.tied;
  return ShapeFromConfig(p.name, c);
}

absl::Status CheckFraction(std::string_view name, double v, double max) {
  if (!(v >= 0 && v <= max)) {
    return absl::InvalidArgumentError(StrCat(name, " ", v, ": must be in [0, ", max, "]"));
  }
  return absl::OkStatus();
}

double Gb(uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

// The per-replica terms; no node needed.
absl::StatusOr<MemoryPlan> PlanReplica(const PlanInput& in) {
  const ModelShape& m = in.model;
  if (m.parameters <= 0 || m.num_layers <= 0 || m.num_kv_heads <= 0 || m.head_dim <= 0) {
    return absl::InvalidArgumentError(
        StrCat("model ", m.name, ": shape is incomplete (parameters, layers, KV heads, head dim)"));
  }
  if (in.context < 1 || in.context > kMaxContextTokens) {
    return absl::InvalidArgumentError(
        StrCat("context ", in.context, ": must be in [1, ", kMaxContextTokens, "]"));
  }
  if (in.concurrency < 1 || in.concurrency > kMaxConcurrency) {
    return absl::InvalidArgumentError(
        StrCat("concurrency ", in.concurrency, ": must be in [1, ", kMaxConcurrency, "]"));
  }
  EXA_RETURN_IF_ERROR(CheckFraction("fragmentation", in.fragmentation, 0.5));
  EXA_RETURN_IF_ERROR(CheckFraction("headroom", in.headroom, 0.5));
  if (in.fragmentation + in.headroom > 0.9) {
    return absl::InvalidArgumentError("fragmentation + headroom: must leave at least 10 %");
  }
  MemoryPlan p;
  bool same_dtype = in.weight_dtype == m.dtype;
  p.weight_bytes = m.checkpoint_bytes > 0 && same_dtype
                       ? m.checkpoint_bytes
                       : static_cast<uint64_t>(m.parameters) * PrecisionBytes(in.weight_dtype);
  p.kv_bytes_per_token =
      uint64_t{2} * m.num_layers * m.num_kv_heads * m.head_dim * PrecisionBytes(in.kv_dtype);
  p.kv_bytes = p.kv_bytes_per_token * in.context * in.concurrency;
  // One full-context prefill step: hidden state, residual, attention output and norm (4 ×
  // hidden), Q, K and V, and the gate and up projections, in the weight dtype; plus fp32 logits
  // for every sequence's last token.
  uint64_t per_token = uint64_t{4} * m.hidden_size + m.q_dim + 2ull * m.num_kv_heads * m.head_dim +
                       2ull * m.intermediate_size;
  p.activation_bytes = per_token * in.context * PrecisionBytes(in.weight_dtype) +
                       uint64_t{4} * m.vocab_size * in.concurrency;
  p.runtime_bytes = in.runtime_fixed_bytes + p.activation_bytes;
  double used = static_cast<double>(p.weight_bytes + p.kv_bytes + p.runtime_bytes);
  double total = used / (1.0 - in.fragmentation - in.headroom);
  p.replica_bytes = (static_cast<uint64_t>(std::ceil(total)) + kMiB - 1) / kMiB * kMiB;
  p.fragmentation_bytes = static_cast<uint64_t>(p.replica_bytes * in.fragmentation);
  p.headroom_bytes =
      p.replica_bytes - p.weight_bytes - p.kv_bytes - p.runtime_bytes - p.fragmentation_bytes;
  return p;
}

}  // namespace

size_t PrecisionBytes(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return 4;
    case Precision::kFp16:
    case Precision::kBf16:
      return 2;
    case Precision::kFp8:
    case Precision::kInt8:
      return 1;
  }
  return 2;
}

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp8:
      return "fp8";
    case Precision::kInt8:
      return "int8";
  }
  return "?";
}

absl::StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "f32") return Precision::kFp32;
  if (name == "fp16" || name == "float16" || name == "f16") return Precision::kFp16;
  if (name == "bf16" || name == "bfloat16") return Precision::kBf16;
  if (name == "fp8" || name == "float8") return Precision::kFp8;
  if (name == "int8") return Precision::kInt8;
  return absl::InvalidArgumentError(
      StrCat("dtype \"", name, "\": expected one of fp32, fp16, bf16, fp8, int8"));
}

ModelShape ShapeFromConfig(std::string name, const engine::ModelConfig& c) {
  ModelShape s;
  s.name = std::move(name);
  s.parameters = c.ParameterCount();
  s.num_layers = c.num_layers;
  s.num_kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.hidden_size = c.hidden_size;
  s.q_dim = c.q_dim();
  s.intermediate_size = c.intermediate_size;
  s.vocab_size = c.vocab_size;
  return s;
}

std::optional<ModelShape> PresetModel(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name || (p.alias[0] != '\0' && name == p.alias)) return ShapeFromPreset(p);
  }
  return std::nullopt;
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

absl::StatusOr<MemoryPlan> PlanMemory(const PlanInput& in) {
  // The bound placement puts on a node's report; packing is linear in replicas per node, so an
  // absurd value would run for minutes.
  if (in.gpu_memory_bytes == 0 || in.gpu_memory_bytes > kMaxGpuMemoryBytes) {
    return absl::InvalidArgumentError(StrCat("gpu memory ", BytesToString(in.gpu_memory_bytes),
                                             ": expected more than 0 and at most ",
                                             BytesToString(kMaxGpuMemoryBytes), ", e.g. 80Gi"));
  }
  if (in.gpus_per_node < 1 || in.gpus_per_node > 1024) {
    return absl::InvalidArgumentError(
        StrCat("gpus per node ", in.gpus_per_node, ": must be in [1, 1024]"));
  }
  if (in.gpus_per_replica < 1 || in.gpus_per_replica > in.gpus_per_node) {
    return absl::InvalidArgumentError(StrCat("gpus per replica ", in.gpus_per_replica,
                                             ": must be in [1, ", in.gpus_per_node, "]"));
  }
  EXA_ASSIGN_OR_RETURN(MemoryPlan p, PlanReplica(in));
  p.node_bytes = in.gpu_memory_bytes * static_cast<uint64_t>(in.gpus_per_node);
  p.replicas_per_node_pooled = static_cast<int>(p.node_bytes / p.replica_bytes);
  p.replicas_per_node = ReplicasPerEmptyNode(in.gpu_memory_bytes, in.gpus_per_node, p.replica_bytes,
                                             in.gpus_per_replica);
  p.node_bytes_used = p.replica_bytes * static_cast<uint64_t>(p.replicas_per_node);
  if (p.replicas_per_node == 0) {
    return absl::FailedPreconditionError(StrCat("a replica of ", in.model.name, " needs ",
                                                BytesToString(p.replica_bytes),
                                                ", more than a node of ", in.gpus_per_node, " × ",
                                                BytesToString(in.gpu_memory_bytes), " GPUs holds"));
  }
  return p;
}

std::string FormatPlan(const PlanInput& in, const MemoryPlan& p) {
  auto row = [](std::string_view what, uint64_t bytes, std::string_view how) {
    return fmt::format("{:<22} {:>10.2f} GB {:>9.2f}Gi  {}\n", what, Gb(bytes),
                       static_cast<double>(bytes) / (uint64_t{1} << 30), how);
  };
  std::string params = in.model.parameters >= 1'000'000'000
                           ? fmt::format("{:.2f} B", in.model.parameters / 1e9)
                           : fmt::format("{:.2f} M", in.model.parameters / 1e6);
  std::string out = fmt::format(
      "model {} ({} parameters), weights {}, KV cache {}, context {} × concurrency {}\n\n",
      in.model.name, params, PrecisionName(in.weight_dtype), PrecisionName(in.kv_dtype), in.context,
      in.concurrency);
  out += fmt::format("{:<22} {:>13} {:>10}  {}\n", "term", "GB (10^9)", "binary", "how");
  out += row("weights", p.weight_bytes,
             in.model.checkpoint_bytes > 0 && in.weight_dtype == in.model.dtype
                 ? "checkpoint size on disk"
                 : fmt::format("{} parameters × {} bytes", in.model.parameters,
                               PrecisionBytes(in.weight_dtype)));
  out += fmt::format(
      "{:<22} {:>10.3f} MB {:>9.3f}Mi  2 × {} layers × {} KV heads × {} head dim × {} "
      "bytes\n",
      "KV per token", p.kv_bytes_per_token / 1e6,
      static_cast<double>(p.kv_bytes_per_token) / (uint64_t{1} << 20), in.model.num_layers,
      in.model.num_kv_heads, in.model.head_dim, PrecisionBytes(in.kv_dtype));
  out += row("KV cache", p.kv_bytes,
             fmt::format("KV per token × {} context × {} concurrency", in.context, in.concurrency));
  out += row("runtime overhead", p.runtime_bytes,
             fmt::format("{} CUDA context + cuBLAS + pools, {:.2f} GB activations",
                         BytesToString(in.runtime_fixed_bytes), Gb(p.activation_bytes)));
  out += row("fragmentation reserve", p.fragmentation_bytes,
             fmt::format("{:.0f} % of the reservation", in.fragmentation * 100));
  out += row("headroom", p.headroom_bytes,
             fmt::format("{:.0f} % of the reservation", in.headroom * 100));
  out += row("per replica", p.replica_bytes,
             fmt::format("(weights + KV + runtime) / (1 − {:.2f} − {:.2f})", in.fragmentation,
                         in.headroom));
  out += fmt::format("\nnode: {} GPUs × {} = {:.1f} GB\n", in.gpus_per_node,
                     BytesToString(in.gpu_memory_bytes), Gb(p.node_bytes));
  out += fmt::format(
      "replicas per node: {} (placement fit, ≥ {} GPU each, shards within one "
      "NVLink domain); pooled bound {}\n",
      p.replicas_per_node, in.gpus_per_replica, p.replicas_per_node_pooled);
  out += fmt::format("{} × {:.1f} GB = {:.1f} GB ≤ {:.1f} GB ({:.1f} % of the node)\n",
                     p.replicas_per_node, Gb(p.replica_bytes), Gb(p.node_bytes_used),
                     Gb(p.node_bytes), 100.0 * p.node_bytes_used / p.node_bytes);
  return out;
}

ModelCatalog ModelCatalog::WithPresets() {
  ModelCatalog c;
  for (const Preset& p : kPresets) {
    c.Add(p.name, ShapeFromPreset(p));
    if (p.alias[0] != '\0') c.Add(p.alias, ShapeFromPreset(p));
  }
  return c;
}

void ModelCatalog::Add(std::string name, ModelShape shape) {
  for (auto& [n, s] : models_) {
    if (n == name) {
      s = std::move(shape);
      return;
    }
  }
  models_.emplace_back(std::move(name), std::move(shape));
}

absl::StatusOr<ModelShape> ModelCatalog::Find(std::string_view name) const {
  for (const auto& [n, s] : models_) {
    if (n == name) return s;
  }
  std::string known;
  for (const auto& [n, s] : models_) StrAppend(&known, known.empty() ? "" : ", ", n);
  return absl::NotFoundError(StrCat("spec.model \"", name, "\": unknown model; known: ", known));
}

absl::StatusOr<uint64_t> ReplicaBytesForSpec(const InferenceReplicaSpec& spec,
                                             const ModelCatalog& catalog) {
  EXA_ASSIGN_OR_RETURN(ModelShape shape, catalog.Find(spec.model));
  PlanInput in;
  in.weight_dtype = shape.dtype;
  // The CPU engine keeps its KV cache in fp32 (engine/model_config.h KvBytesPerToken).
  in.kv_dtype = spec.backend == "cpu" ? Precision::kFp32 : shape.dtype;
  in.model = std::move(shape);
  in.context = spec.context;
  in.concurrency = spec.concurrency;
  in.gpus_per_replica = spec.resources.gpu;
  EXA_ASSIGN_OR_RETURN(MemoryPlan p, PlanReplica(in));
  if (spec.resources.memory_bytes == 0) return p.replica_bytes;
  if (spec.resources.memory_bytes < p.replica_bytes) {
    return absl::InvalidArgumentError(
        StrCat("spec.resources.memory \"", BytesToString(spec.resources.memory_bytes),
               "\": below the planner's ", BytesToString(p.replica_bytes), " for ", spec.model,
               " at context ", spec.context, " × concurrency ", spec.concurrency,
               " (run exaserve-cli plan); raise it or omit it"));
  }
  return spec.resources.memory_bytes;
}

}  // namespace exa::scheduler
