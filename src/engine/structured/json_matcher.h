// Follows output bytes through a compiled JSON Schema (json_schema.h): which bytes may come next,
// whether the output so far is a whole value, and whether nothing but whitespace may follow.
//
// The state is a set of at most kMaxThreads stacks (more than one only while anyOf alternatives
// are all still possible). Stacks are persistent: a Frame is never changed once made, a step
// makes new frames over its parent's, and a byte that changes nothing (a plain character inside
// an unbounded string) returns the same frame, so JsonConstraint's walk over the vocabulary
// (token_trie.h) copies nothing on the common path. Frames live in a FrameArena.
//
// Thread safety: none; one matcher per sequence, used by the engine thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/structured/json_schema.h"

namespace exa::engine::structured {

inline constexpr size_t kMaxThreads = 16;

enum class Phase : uint8_t {
  kEnd,            // after the root value: whitespace only
  kValue,          // before a value of `node`: whitespace, then its first byte
  kObjectFirst,    // after '{': whitespace, a key or '}'
  kObjectKeyNext,  // after ',': whitespace, then a key
  kObjectKey,      // inside a key
  kObjectColon,    // after a key: whitespace, ':'
  kObjectNext,     // after a member: whitespace, ',' or '}'
  kArrayFirst,     // after '[': whitespace, ']' or an element
  kArrayNext,      // after an element: whitespace, ',' or ']'
  kString,         // inside a string value
  kNumber,         // inside a number
  kLiteral,        // inside an enum / const value, true, false or null
  kText,           // inside the grammar's prefix (sub 0) or suffix (sub 1): `count` bytes matched
  kRaw,            // inside a bare pattern's text (CompileRegexGrammar): `seen` its state
};

struct Frame {
  const Frame* parent = nullptr;
  int32_t node = kAnyNode;
  Phase phase = Phase::kEnd;
  uint8_t ws = 0;   // whitespace bytes in a row so far
  uint8_t sub = 0;  // string: escape and UTF-8 state; number: DFA state; literal: which set
  uint8_t depth = 0;
  int32_t member = kAnyNode;  // object: the schema of the member whose key was just read
  // string characters (when the schema bounds them), array elements, key or literal bytes,
  // number bytes; value: alternatives taken without consuming a byte (bounds a $ref cycle)
  int64_t count = 0;
  // object: properties already given; a number under bounds: its integer digits' value; a string
  // under a pattern, or raw text: the pattern's automaton state (regex.h)
  uint64_t seen = 0;
  // key: properties still possible; literal: values still possible; a number under bounds: its
  // fraction digits' value
  uint64_t candidates = 0;
  bool free_key = false;  // key: may be a member outside `properties`
  // A number under bounds (number_bounds.h): after '-', and how many digits each side of '.'.
  bool negative = false;
  uint8_t int_digits = 0;
  uint8_t frac_digits = 0;
};

// Bump allocation of frames; Reset frees them all at once.
class FrameArena {
 public:
  const Frame* Make(const Frame& f);
  void Reset() { used_ = 0; }
  size_t used() const { return used_; }

 private:
  static constexpr size_t kChunk = 4096;
  std::vector<std::unique_ptr<Frame[]>> chunks_;
  size_t used_ = 0;
};

using Stack = const Frame*;  // the top frame; the rest hangs from `parent`

class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const Grammar> grammar);

  JsonMatcher(const JsonMatcher&) = delete;
  JsonMatcher& operator=(const JsonMatcher&) = delete;

  // Consumes `bytes` if the output may continue with them (the state is unchanged otherwise).
  bool Advance(std::string_view bytes) { return Follow(bytes, /*commit=*/true); }
  // Whether the output may continue with `bytes`; the state stays as it is.
  bool Accepts(std::string_view bytes) { return Follow(bytes, /*commit=*/false); }
  // The bytes so far are one whole value (possibly followed by whitespace).
  bool Complete() const { return Complete(stacks_); }
  // Complete, and nothing but whitespace may follow.
  bool Terminal() const;

  // Inside a string value or a key that can no longer be a known property, between characters:
  // how many more characters of plain text (TokenTrie::Node::plain) may follow (INT64_MAX when
  // the string is unbounded; such text then leaves the state as it is); -1 anywhere else.
  int64_t PlainStringRoom() const;

  // For JsonConstraint's vocabulary walk: the current stacks, and one byte's successors of
  // `in` appended to `out` (frames made in `arena`). Returns false when no stack accepts it.
  std::span<const Stack> stacks() const { return stacks_; }
  bool Step(std::span<const Stack> in, uint8_t byte, std::vector<Stack>* out,
            FrameArena* arena) const;
  bool Complete(std::span<const Stack> stacks) const;

 private:
  bool Follow(std::string_view bytes, bool commit);
  // Appends the successors of one stack after `byte` to `out`.
  void StepOne(Stack s, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  void StepValue(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  void StepObject(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  void StepKey(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  void StepArray(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  void StepString(const Frame& f, Stack s, uint8_t byte, std::vector<Stack>* out,
                  FrameArena* arena) const;
  void StepNumber(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  // A number frame may end here: its bytes so far are a whole number (within its bounds).
  bool NumberEnds(const Frame& f) const;
  void StepLiteral(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  void StepText(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  void StepPatternString(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                         FrameArena* arena) const;
  void StepRaw(const Frame& f, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const;
  const ByteDfa& Pattern(const Frame& f) const;
  const std::vector<std::string>& Literals(const Frame& f) const;
  // The candidates of a literal frame that its `count` bytes already spell whole.
  uint64_t WholeLiterals(const Frame& f) const;
  // Copies the live stacks into a fresh arena so the old frames can go.
  void Compact();

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  FrameArena arena_;
  FrameArena spare_;
  std::vector<Stack> scratch_;
};

}  // namespace exa::engine::structured
