// EngineInfo from a model's config (engine_info.h): a pure function.
#include "engine/engine_info.h"

#include <algorithm>

namespace exa::engine {

EngineInfo ModelEngineInfo(std::string backend, const ModelConfig& config, const EngineOptions& o,
                           int64_t weight_bytes) {
  EngineInfo info;
  info.backend = std::move(backend);
  info.vocab_size = config.vocab_size;
  info.max_context =
      o.max_context > 0 ? std::min(o.max_context, config.MaxContext()) : config.MaxContext();
  info.eos_token_ids = config.eos_token_ids;
  info.bos_token_id = config.bos_token_id;
  info.weight_bytes = weight_bytes;
  info.kv_block_size = o.kv_block_size;
  return info;
}

}  // namespace exa::engine
