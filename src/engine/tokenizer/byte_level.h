// GPT-2's reversible byte <-> character map (the "ByteLevel" components of tokenizer.json):
// printable Latin-1 bytes stand for themselves, the other 68 bytes are shifted to U+0100..U+0143
// so that every byte has a visible, non-whitespace character in the vocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace exa::engine::byte_level {

// The UTF-8 of the character that stands for `byte`.
std::string_view CharForByte(uint8_t byte);

// Appends the byte-level form of every byte of `text`.
void AppendEncoded(std::string_view text, std::string* out);

// The byte a character stands for, if it is one of the 256 byte-level characters.
std::optional<uint8_t> ByteForChar(char32_t c);

}  // namespace exa::engine::byte_level
