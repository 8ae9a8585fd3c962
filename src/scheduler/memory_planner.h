// The memory planner (docs/architecture.md#memory-arithmetic): GPU memory per replica, computed
// from the model's shape and the spec's context × concurrency, never guessed. Each term is
// accounted separately, then headroom is kept:
//
//   weights        parameters × weight dtype bytes (or the checkpoint's size on disk)
//   KV per token   2 (K and V) × layers × KV heads × head dim × KV dtype bytes
//   KV cache       KV per token × context × concurrency
//   runtime        CUDA context + cuBLAS workspace + allocator pools (fixed), plus activation
//                  buffers for one full-context prefill step
//   fragmentation  a share of the reservation lost to allocator fragmentation
//   (docs/architecture.md#memory-arithmetic:
//                  5–8 % after 72 h; default 8 %)
//   headroom       a share of the reservation kept free (docs/architecture.md#memory-arithmetic:
//   10–15 %; default 15 %;
//                  3 % OOMs)
//   per replica    (weights + KV cache + runtime) / (1 − fragmentation − headroom)
//
// For Llama-2-13B FP16 at context 4096 × concurrency 4 this gives 26.0 GB weights, 0.82 MB KV per
// token, 13.4 GB KV and 53.3 GB per replica: the arithmetic's 26 + 13 + 14 GB of margin = 53 GB.
// Replicas per node come from the same fit placement uses (device_fit.h): on 8 × 80 GiB GPUs, 12.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::engine {
struct ModelConfig;
}

namespace exa::scheduler {

struct InferenceReplicaSpec;

enum class Precision : uint8_t { kFp32, kFp16, kBf16, kFp8, kInt8 };
size_t PrecisionBytes(Precision p);
std::string_view PrecisionName(Precision p);
// "fp32", "fp16", "bf16", "fp8", "int8" (also "float16", "bfloat16", "float32" as in
// Hugging Face's torch_dtype).
absl::StatusOr<Precision> ParsePrecision(std::string_view name);

// What the planner needs to know about a model.
struct ModelShape {
  std::string name;
  int64_t parameters = 0;
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t hidden_size = 0;
  int32_t q_dim = 0;
  int32_t intermediate_size = 0;
  int32_t vocab_size = 0;
  Precision dtype = Precision::kFp16;  // the checkpoint's
  uint64_t checkpoint_bytes = 0;       // summed safetensors sizes when known, else 0
};

ModelShape ShapeFromConfig(std::string name, const engine::ModelConfig& config);
// Built-in shapes of well-known models, from their published config.json: llama-2-7b,
// llama-2-13b (alias llama-13b), llama-2-70b, llama-3-8b, llama-3-70b, mistral-7b.
std::optional<ModelShape> PresetModel(std::string_view name);
std::vector<std::string> PresetNames();

struct PlanInput {
  ModelShape model;
  Precision weight_dtype = Precision::kFp16;
  Precision kv_dtype = Precision::kFp16;
  int context = 4096;
  int concurrency = 4;
  double fragmentation = 0.08;  // docs/architecture.md#memory-arithmetic: 5–8 % after 72 h
  double headroom = 0.15;       // docs/architecture.md#memory-arithmetic: keep 10–15 %
  // CUDA context (~0.5 GiB), cuBLAS workspaces and allocator pools per replica process.
  uint64_t runtime_fixed_bytes = uint64_t{1} << 30;
  uint64_t gpu_memory_bytes = 0;  // per GPU
  int gpus_per_node = 8;
  int gpus_per_replica = 1;
};

struct MemoryPlan {
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes_per_token = 0;
  uint64_t kv_bytes = 0;
  uint64_t activation_bytes = 0;
  uint64_t runtime_bytes = 0;  // fixed + activations
  uint64_t fragmentation_bytes = 0;
  uint64_t headroom_bytes = 0;
  uint64_t replica_bytes = 0;  // the reservation per replica, rounded up to a MiB
  int replicas_per_node = 0;   // by the placement fit (device_fit.h)
  // floor(node memory / replica bytes): the pooled bound docs/architecture.md#memory-arithmetic
  // writes (12 × 53 ≤ 640).
  int replicas_per_node_pooled = 0;
  uint64_t node_bytes = 0;
  uint64_t node_bytes_used = 0;  // replicas_per_node × replica_bytes
};

// Fails with INVALID_ARGUMENT naming the input when a term is out of range, and with
// FAILED_PRECONDITION when not even one replica fits on a node.
absl::StatusOr<MemoryPlan> PlanMemory(const PlanInput& input);

// The table `exaserve-cli plan` prints.
std::string FormatPlan(const PlanInput& input, const MemoryPlan& plan);

// Model name → shape, for specs ("llama-13b"). Presets plus models added at run time.
class ModelCatalog {
 public:
  static ModelCatalog WithPresets();
  void Add(std::string name, ModelShape shape);
  // NOT_FOUND naming the model and the known ones.
  absl::StatusOr<ModelShape> Find(std::string_view name) const;

 private:
  std::vector<std::pair<std::string, ModelShape>> models_;
};

// The reservation a spec's replicas get: the planner's estimate for the spec's model, context and
// concurrency, or spec.resources.memory when set (which must cover the estimate).
absl::StatusOr<uint64_t> ReplicaBytesForSpec(const InferenceReplicaSpec& spec,
                                             const ModelCatalog& catalog);

}  // namespace exa::scheduler
