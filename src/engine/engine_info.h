// The EngineInfo of a model-backed replica: what every real backend (cpu, cuda) reports from the
// model's config.json and the engine options, made in one place so that the backends agree. The
// KV blocks (each backend sizes its own cache) and load timings are left to the backend.
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "engine/model_config.h"

namespace exa::engine {

// `backend` ("cpu", "cuda") serving `config` under `options`, with weights of `weight_bytes`:
// the context is the model's, capped by options.max_context when that is set.
EngineInfo ModelEngineInfo(std::string backend, const ModelConfig& config,
                           const EngineOptions& options, int64_t weight_bytes);

}  // namespace exa::engine
