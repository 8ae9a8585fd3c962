// Content hashes of KV-cache blocks for automatic prefix caching
// (docs/architecture.md#prefix-cache). A full block of `block_size` tokens is named by a hash
// chained over its parent block's hash and its own tokens, so equal hashes mean equal whole
// prefixes, not just equal blocks. The chain starts from a root that names everything else the
// block's K and V depend on: the replica's cache namespace (model, version, dtype, adapter: see
// EngineOptions::prefix_cache_namespace) and the request's cache salt (tenants that must not share
// get different roots).
//
// The hash is SHA-256 cut to 128 bits: a client who controls prompts cannot make two different
// prefixes collide (which would hand another request's K and V to theirs), and gateways compute
// the same names from the same tokens to route on what a replica holds. Debug builds also compare
// the tokens on every hit (kv_cache.h).
//
// Thread safety: a PrefixHasher is used by one thread at a time; BlockHash is a value.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash128.h"

namespace exa::engine {

using BlockHash = Hash128;

class PrefixHasher {
 public:
  PrefixHasher();
  ~PrefixHasher();
  PrefixHasher(const PrefixHasher&) = delete;
  PrefixHasher& operator=(const PrefixHasher&) = delete;

  // The chain's root for a cache namespace and a request's salt (either may be empty).
  BlockHash Root(std::string_view cache_namespace, std::string_view salt);
  // The hash of a block holding `tokens` whose parent block hashed to `parent`.
  BlockHash Chain(const BlockHash& parent, std::span<const int32_t> tokens);
  // Extends `hashes` (the chain of `tokens`' first hashes->size() full blocks) to the first
  // `full_blocks` full blocks of `tokens`. `full_blocks` * block_size must not exceed
  // tokens.size().
  void Extend(const BlockHash& root, std::span<const int32_t> tokens, int32_t block_size,
              int32_t full_blocks, std::vector<BlockHash>* hashes);

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

}  // namespace exa::engine
