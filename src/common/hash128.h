// A 128-bit hash value: a name for content (a KV-cache block, docs/architecture.md#prefix-cache)
// that layers which do not compute it (the router) can hold, compare and index.
//
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace exa {

struct Hash128 {
  uint64_t hi = 0;
  uint64_t lo = 0;

  friend bool operator==(const Hash128&, const Hash128&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Hash128& v) {
    return H::combine(std::move(h), v.hi, v.lo);
  }
  // 32 lowercase hex digits.
  std::string ToHex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
      out[15 - i] = kDigits[(hi >> (4 * i)) & 0xf];
      out[31 - i] = kDigits[(lo >> (4 * i)) & 0xf];
    }
    return out;
  }
  // The 16 bytes big-endian (the wire form), and back; FromBytes needs exactly 16.
  std::string ToBytes() const {
    std::string out(16, '\0');
    for (int i = 0; i < 8; ++i) {
      out[i] = static_cast<char>((hi >> (56 - 8 * i)) & 0xff);
      out[8 + i] = static_cast<char>((lo >> (56 - 8 * i)) & 0xff);
    }
    return out;
  }
  static Hash128 FromBytes(const char* bytes) {
    Hash128 h;
    for (int i = 0; i < 8; ++i) h.hi = (h.hi << 8) | static_cast<unsigned char>(bytes[i]);
    for (int i = 8; i < 16; ++i) h.lo = (h.lo << 8) | static_cast<unsigned char>(bytes[i]);
    return h;
  }
};

}  // namespace exa
