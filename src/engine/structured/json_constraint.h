// Structured output for one sequence: before each token the engine masks every logit whose token
// cannot continue the output as JSON matching the schema (docs/architecture.md#structured-outputs).
// The end-of-sequence ids are allowed once the output is a whole value; once nothing but
// whitespace could follow, the sequence ends without asking the model.
//
// Mask walks the vocabulary's trie (token_trie.h) with the matcher: a subtree is left the moment
// its prefix is refused, and inside an unbounded string a byte that changes nothing costs no
// allocation. The allowed sets of the last kCachedMasks states are kept, keyed by the states'
// contents: every token of one long string value sees the same state, so only its first pays
// for the walk.
//
// Thread safety: none; one per sequence, used by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/structured/json_matcher.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/token_trie.h"

namespace exa::engine::structured {

class JsonConstraint {
 public:
  // `end_ids`: the ids that end the sequence (the model's end-of-sequence and the request's stop
  // token ids).
  JsonConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                 std::vector<int32_t> end_ids);

  // Sets the logits of tokens that may not come next to -infinity. False when no token may: the
  // vocabulary cannot write what the schema needs next.
  bool Mask(std::span<float> logits);
  // The tokens Mask would leave, in id order (for tests and tools).
  std::vector<int32_t> Allowed();
  // Consumes a chosen token: false when it may not come next (the state is then unchanged).
  bool Accept(int32_t token) { return Follow(token, /*commit=*/true); }
  // Whether `token` may come next; the state stays as it is.
  bool Accepts(int32_t token) { return Follow(token, /*commit=*/false); }
  // The output is one whole value / nothing but whitespace may follow.
  bool Complete() const { return matcher_.Complete(); }
  bool Terminal() const { return matcher_.Terminal(); }

 private:
  static constexpr size_t kCachedMasks = 4;
  struct CachedMask {
    std::string state;           // StateKey() when it was made
    std::vector<uint64_t> bits;  // bit id: the token may come next
    uint64_t last_used = 0;
  };

  // Points allowed_ at the allowed set of the matcher's state, from the cache or a walk.
  void FindAllowed();
  std::string StateKey() const;
  bool IsAllowed(size_t id) const { return ((*allowed_)[id >> 6] >> (id & 63)) & 1; }
  void Walk(uint32_t node, size_t level);
  bool IsEnd(int32_t token) const;
  bool Follow(int32_t token, bool commit);

  JsonMatcher matcher_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  std::vector<float> end_logits_;  // Mask's scratch: the end ids' logits before the pass
  std::vector<CachedMask> cache_;
  uint64_t uses_ = 0;
  const std::vector<uint64_t>* allowed_ = nullptr;  // one of cache_'s sets
  // Scratch for the walk: the stacks after each byte, their frames.
  std::vector<std::vector<Stack>> levels_;
  FrameArena scratch_;
  // JsonMatcher::PlainStringRoom() where the walk starts: a plain subtree whose tokens have at
  // most this many characters is allowed whole.
  int64_t plain_room_ = -1;
};

}  // namespace exa::engine::structured
