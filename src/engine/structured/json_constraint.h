// Structured output for one sequence: before each token the engine masks every logit whose token
// cannot continue the output as JSON matching the schema (docs/architecture.md#structured-outputs).
// The end-of-sequence ids are allowed once the output is a whole value; once nothing but
// whitespace could follow, the sequence ends without asking the model.
//
// Mask walks the vocabulary's trie (token_trie.h) with the matcher: a subtree is left the moment
// its prefix is refused, and inside an unbounded string a byte that changes nothing costs no
// allocation.
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
  // Fills allowed_ from the matcher's state.
  void FindAllowed();
  void Walk(uint32_t node, size_t level);
  bool IsEnd(int32_t token) const;
  bool Follow(int32_t token, bool commit);

  JsonMatcher matcher_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  // Scratch for Mask: allowed_[id], the stacks after each byte of the walk, their frames.
  std::vector<uint8_t> allowed_;
  std::vector<std::vector<Stack>> levels_;
  FrameArena scratch_;
};

}  // namespace exa::engine::structured
