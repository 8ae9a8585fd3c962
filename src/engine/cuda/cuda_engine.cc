#include "engine/cuda/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <filesystem>

#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device_weights.h"
#include "engine/engine_info.h"
#include "engine/llm_engine.h"
#include "engine/model.h"
#include "engine/step_executor.h"
#include "kernels/cuda_check.h"

namespace exa::engine::cuda {
namespace {

absl::Status CheckDevice(int device) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky, but leave no error behind for the next call
    return absl::FailedPreconditionError(
        StrCat("backend cuda: no usable NVIDIA driver or GPU: ", cudaGetErrorName(error), " (",
               cudaGetErrorString(error), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(StrCat(
        "backend cuda: device ", device, " does not exist; this machine has ", count, " GPU(s)"));
  }
  return absl::OkStatus();
}

// The identity replicas share weights by: the resolved model directory and its checkpoint size
// (a new version is a new directory, docs/architecture.md#weights).
std::string ModelKey(const std::string& dir, const ModelWeights& weights) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(dir, ec);
  return StrCat(ec ? dir : canonical.string(), "#", weights.bytes());
}

DType CacheDtype(const ModelWeights& weights) {
  // The projection weights' type: bf16 and fp16 checkpoints get a half-precision KV cache.
  return weights.layers().empty() ? weights.embed_tokens().dtype : weights.layers()[0].k.dtype;
}

}  // namespace

bool CudaBuilt() { return true; }

absl::StatusOr<std::unique_ptr<Engine>> CreateCudaEngine(
    const EngineOptions& o, std::shared_ptr<const Detokenizer> detokenizer) {
  EXA_RETURN_IF_ERROR(CheckDevice(o.device));
  EXA_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(o.model_dir));
  EXA_ASSIGN_OR_RETURN(auto weights, ModelWeights::Load(o.model_dir, config));
  EngineInfo info = ModelEngineInfo("cuda", config, o, static_cast<int64_t>(weights->bytes()));

  CudaBackendOptions bo;
  bo.device = o.device;
  bo.max_step_tokens = o.max_batch_tokens;
  bo.max_sequences = o.max_running;
  bo.max_context = info.max_context;
  bo.kv_block_size = o.kv_block_size;
  bo.kv_cache_bytes = o.kv_cache_bytes;
  bo.kv_dtype = CacheDtype(*weights);
  info.kv_blocks_total =
      CudaKvBlocks(config, o.kv_cache_bytes, o.kv_block_size, DTypeBytes(bo.kv_dtype));
  if (info.kv_blocks_total < 1) {
    return absl::InvalidArgumentError(StrCat("engine: kv_cache_bytes ", o.kv_cache_bytes,
                                             " is less than one block of ", o.kv_block_size,
                                             " tokens on the cuda backend"));
  }
  EXA_ASSIGN_OR_RETURN(auto shared,
                       DeviceWeights::Acquire(o.device, ModelKey(o.model_dir, *weights), *weights));
  info.weight_load_seconds = shared->load_seconds();
  EXA_ASSIGN_OR_RETURN(auto backend, CudaBackend::Create(config, bo, shared, *weights));
  EXA_RETURN_IF_ERROR(backend->AllocateKvCache(
      {config.num_layers, info.kv_blocks_total, o.kv_block_size, config.kv_dim()}));
  EXA_ASSIGN_OR_RETURN(auto model,
                       Model::Create(config, *weights, backend.get(),
                                     {o.max_batch_tokens, o.max_running, o.kv_block_size}));
  EXA_LOG_INFO("engine", "model loaded",
               {{"dir", o.model_dir},
                {"backend", "cuda"},
                {"device", o.device},
                {"parameters", config.ParameterCount()},
                {"weight_bytes", info.weight_bytes},
                {"replicas_on_weight_copy", DeviceWeights::SharedCount(shared) - 1},
                {"pool_bytes", backend->pool_bytes()},
                {"kv_blocks", info.kv_blocks_total}});
  auto executor = std::make_unique<ModelExecutor>(std::move(backend), std::move(weights),
                                                  std::move(model), o.kv_block_size);
  return std::unique_ptr<Engine>(
      new LlmEngine(o, std::move(info), std::move(executor), std::move(detokenizer)));
}

}  // namespace exa::engine::cuda
