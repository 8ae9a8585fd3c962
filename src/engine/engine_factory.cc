// CreateEngine: builds the executor for the configured backend and wraps it in an LlmEngine.
#include <algorithm>

#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/engine.h"
#include "engine/engine_info.h"
#include "engine/llm_engine.h"
#include "engine/sim_replica.h"

namespace exa::engine {
namespace {

absl::Status ValidateOptions(const EngineOptions& o) {
  if (o.max_batch_tokens < 1 || o.max_running < 1 || o.max_queue < 1) {
    return absl::InvalidArgumentError(StrCat("engine: max_batch_tokens ", o.max_batch_tokens,
                                             ", max_running ", o.max_running, " and max_queue ",
                                             o.max_queue, " must all be at least 1"));
  }
  if (o.kv_block_size < 1 || o.kv_block_size > 1024) {
    return absl::InvalidArgumentError(
        StrCat("engine: kv_block_size ", o.kv_block_size, " must be in [1, 1024]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Engine>> CreateCpuEngine(
    const EngineOptions& o, std::shared_ptr<const Detokenizer> detokenizer) {
  EXA_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(o.model_dir));
  EXA_ASSIGN_OR_RETURN(auto weights, ModelWeights::Load(o.model_dir, config));
  EngineInfo info = ModelEngineInfo("cpu", config, o, static_cast<int64_t>(weights->bytes()));
  info.kv_blocks_total = KvCache::BlocksForBudget(o.kv_cache_bytes, config, o.kv_block_size);
  if (info.kv_blocks_total < 1) {
    return absl::InvalidArgumentError(StrCat(
        "engine: kv_cache_bytes ", o.kv_cache_bytes, " is less than one block of ", o.kv_block_size,
        " tokens (", config.KvBytesPerToken() * o.kv_block_size, " bytes)"));
  }
  auto backend =
      std::make_unique<cpu::CpuBackend>(o.threads, DType::kF32, absl::Microseconds(o.cpu_spin_us));
  if (o.cpu_bf16_activations) backend->set_matmul_input_rounding(DType::kBF16, 1);
  EXA_RETURN_IF_ERROR(backend->AllocateKvCache(
      {config.num_layers, info.kv_blocks_total, o.kv_block_size, config.kv_dim()}));
  EXA_ASSIGN_OR_RETURN(auto model,
                       Model::Create(config, *weights, backend.get(),
                                     {o.max_batch_tokens, o.max_running, o.kv_block_size}));
  EXA_LOG_INFO("engine", "model loaded",
               {{"dir", o.model_dir},
                {"architecture", config.architecture},
                {"parameters", config.ParameterCount()},
                {"weight_bytes", info.weight_bytes},
                {"kv_blocks", info.kv_blocks_total},
                {"threads", backend->threads()},
                {"cpu_isa", std::string(cpu::IsaName(cpu::ActiveIsa()))}});
  auto executor = std::make_unique<ModelExecutor>(std::move(backend), std::move(weights),
                                                  std::move(model), o.kv_block_size);
  return std::unique_ptr<Engine>(
      new LlmEngine(o, std::move(info), std::move(executor), std::move(detokenizer)));
}

absl::StatusOr<std::unique_ptr<Engine>> CreateSimEngine(
    const EngineOptions& o, std::shared_ptr<const Detokenizer> detokenizer) {
  EXA_ASSIGN_OR_RETURN(EngineInfo info, SimEngineInfo(o));
  return std::unique_ptr<Engine>(
      new LlmEngine(o, std::move(info), std::make_unique<SimExecutor>(o.sim, o.kv_cache_bytes),
                    std::move(detokenizer)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(
    const EngineOptions& options, std::shared_ptr<const Detokenizer> detokenizer) {
  EXA_RETURN_IF_ERROR(ValidateOptions(options));
  if (options.backend == "cpu") return CreateCpuEngine(options, std::move(detokenizer));
  if (options.backend == "sim") return CreateSimEngine(options, std::move(detokenizer));
  if (options.backend == "cuda") return cuda::CreateCudaEngine(options, std::move(detokenizer));
  return absl::InvalidArgumentError(StrCat("engine: backend \"", options.backend,
                                           "\" is not supported; expected cpu, cuda or sim"));
}

}  // namespace exa::engine
