// The syntax half of regex.h: an ECMA-262 pattern parsed into a tree of character sets,
// concatenations, alternations and repeats (the subset regex.h lists), and the UTF-8 byte
// ranges a set of code points compiles to. regex.cc builds the automaton from them.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::engine::structured::regex_syntax {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Code points as sorted, disjoint, non-adjacent ranges, surrogates never included.
using CodeSet = std::vector<std::pair<uint32_t, uint32_t>>;

// `set` sorted, merged and without surrogates (which UTF-8 cannot encode).
CodeSet Normalize(CodeSet set);

// One node of a parsed pattern: one character of `set` (empty: none matches), `children` in a
// row, one of `children`, or children[0] repeated min to max times; kEmpty matches the empty
// text (what an anchor leaves).
struct Ast {
  enum class Kind : uint8_t { kEmpty, kSet, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  CodeSet set;
  std::vector<int32_t> children;
  int64_t min = 0;
  int64_t max = -1;  // -1: unbounded
};

// The nodes of a pattern, `root` the whole of it.
struct ParsedRegex {
  std::vector<Ast> nodes;
  int32_t root = 0;
};

// INVALID_ARGUMENT "at byte N: ..." naming what is malformed or unsupported.
absl::StatusOr<ParsedRegex> ParseRegex(std::string_view pattern);

// A byte range of one position of a UTF-8 encoding.
using ByteRange = std::pair<uint8_t, uint8_t>;

// The UTF-8 encodings of code points lo..hi (no surrogates) as sequences of byte ranges: each
// sequence's bytes each in their range, every such byte string one of them; appended to `out`.
void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>* out);

}  // namespace exa::engine::structured::regex_syntax
