#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/utf8.h"

namespace exa::engine::byte_level {
namespace {

bool StandsForItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> char_of_byte{};
  std::array<std::string, 256> utf8_of_byte;
  // Indexed by character; -1 where the character stands for no byte. The characters are all
  // below U+0144 (256 + the 68 shifted bytes).
  std::array<int16_t, 256 + 68> byte_of_char;
  Tables() {
    byte_of_char.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char_of_byte[b] = StandsForItself(b) ? static_cast<char32_t>(b) : next++;
      utf8::Append(&utf8_of_byte[b], char_of_byte[b]);
      byte_of_char[char_of_byte[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

std::string_view CharForByte(uint8_t byte) { return GetTables().utf8_of_byte[byte]; }

void AppendEncoded(std::string_view text, std::string* out) {
  const Tables& tables = GetTables();
  for (char c : text) out->append(tables.utf8_of_byte[static_cast<uint8_t>(c)]);
}

std::optional<uint8_t> ByteForChar(char32_t c) {
  const Tables& tables = GetTables();
  if (c >= tables.byte_of_char.size() || tables.byte_of_char[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables.byte_of_char[c]);
}

}  // namespace exa::engine::byte_level
