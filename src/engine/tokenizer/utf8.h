// UTF-8 helpers for the tokenizer. Hugging Face tokenizers works on Rust `str` (always valid
// UTF-8) and turns bytes back into text with `String::from_utf8_lossy`; these functions give the
// same results so that our ids and decoded strings match theirs byte for byte.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace exa::engine::utf8 {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Length of the valid UTF-8 sequence that starts at s[i], or 0 when s[i] does not start one
// (invalid lead byte, bad continuation, overlong form, surrogate, past U+10FFFF or cut short).
size_t ValidSequenceLength(std::string_view s, size_t i);

// Decodes the character at s[i], which must start a valid sequence (ValidSequenceLength > 0).
char32_t DecodeAt(std::string_view s, size_t i, size_t length);

void Append(std::string* out, char32_t code_point);

bool IsValid(std::string_view s);

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string Lossy(std::string_view bytes);

// True when `s` ends with an incomplete (but so far valid) multi-byte sequence: more bytes may
// still complete it. Used by the streaming decoder to hold such bytes back.
bool EndsWithIncompleteSequence(std::string_view s);

// Calls fn(code_point, byte_offset, byte_length) for each character of a valid UTF-8 string.
template <typename Fn>
void ForEachChar(std::string_view s, Fn&& fn) {
  size_t i = 0;
  while (i < s.size()) {
    size_t length = ValidSequenceLength(s, i);
    if (length == 0) length = 1;  // Callers pass valid text; never loop forever on bad input.
    fn(DecodeAt(s, i, length), i, length);
    i += length;
  }
}

// Unicode White_Space, which is what Rust's char::is_whitespace and regex `\s` test.
bool IsWhitespace(char32_t c);

}  // namespace exa::engine::utf8
