// CreateCudaEngine: the `cuda` backend of CreateEngine (engine/engine.h). Loads (or shares) the
// model's weights on GPU `options.device`, reserves the replica's device pool (KV cache from
// `kv_cache_bytes`, activations and workspaces), and wraps a Model on a CudaBackend in an
// LlmEngine. Without a driver or device, in a build without CUDA, or when the GPU lacks the
// memory: FAILED_PRECONDITION with the reason (the replica fails, the node keeps serving).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace exa::engine::cuda {

// Whether this binary was built with the CUDA backend.
bool CudaBuilt();

absl::StatusOr<std::unique_ptr<Engine>> CreateCudaEngine(
    const EngineOptions& options, std::shared_ptr<const Detokenizer> detokenizer);

}  // namespace exa::engine::cuda
