// One request inside an engine: its tokens (prompt, then generated), how many of them have K and
// V in the cache, its block table, sampler and text stream.
//
// Thread safety: owned by the engine thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/detokenizer.h"
#include "engine/prefix_hash.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/structured/json_constraint.h"

namespace exa::engine {

struct Sequence {
  Sequence(RequestId id, GenerateRequest req, uint64_t seed, absl::Time arrival)
      : id(id),
        request(std::move(req)),
        tokens(request.prompt_tokens),
        prompt_len(static_cast<int32_t>(request.prompt_tokens.size()) - request.resumed_tokens),
        sampler(request.sampling, request.sampling.seed.value_or(seed)),
        arrival(arrival) {}

  int32_t generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
  int32_t uncomputed() const { return static_cast<int32_t>(tokens.size()) - computed; }
  bool prefilling() const { return uncomputed() > 1 || generated() == 0; }

  RequestId id;
  GenerateRequest request;
  std::vector<int32_t> tokens;  // prompt then generated
  int32_t prompt_len;           // without the tokens a resumed request generated before (request.h)
  int32_t computed = 0;         // tokens whose K and V are in the cache
  std::vector<int32_t> blocks;  // block table
  // Prefix caching (kv_cache.h): the chained hashes of the first full blocks of `tokens` (kept
  // across preemptions: tokens are only ever appended), their root, and how many of `blocks`
  // are published or were taken from the cache.
  std::vector<BlockHash> block_hashes;
  std::optional<BlockHash> hash_root;
  int32_t published_blocks = 0;
  Sampler sampler;
  std::unique_ptr<structured::JsonConstraint> constraint;  // set when request.grammar is
  std::unique_ptr<TextStream> text_stream;
  std::string text;      // all generated text so far
  size_t text_sent = 0;  // bytes of `text` already streamed
  absl::Time arrival;
  bool scheduled = false;  // ran in a step once: its queue time is counted
  std::optional<absl::Time> last_token_time;
  int32_t preemptions = 0;
};

}  // namespace exa::engine
