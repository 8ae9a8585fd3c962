#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace exa {

// `s` with its ASCII letters in lower case, other bytes as they are (header names, environment
// variable names).
inline std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// True when every character of `s` is an ASCII letter, a digit or one of `extra`: the rule for
// names that end up in logs, file names and labels (node ids, certificate names, request ids).
inline bool OnlyAlnumOr(std::string_view s, std::string_view extra) {
  for (char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && extra.find(c) == std::string_view::npos) return false;
  }
  return true;
}

// ASCII control characters (C0 and DEL): never allowed in names, labels or paths that reach
// logs, file names or terminals.
inline bool IsAsciiControl(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

// True when `s` holds an ASCII control character.
inline bool HasAsciiControl(std::string_view s) {
  for (char c : s) {
    if (IsAsciiControl(c)) return true;
  }
  return false;
}

// True when `s` holds a space or an ASCII control character (ids and store names: one token).
inline bool HasSpaceOrControl(std::string_view s) {
  for (char c : s) {
    if (c == ' ' || IsAsciiControl(c)) return true;
  }
  return false;
}

// Position of the first byte of `s` that is not well-formed UTF-8 (overlong forms and surrogates
// included), or npos: protobuf refuses to carry such strings, and JSON cannot.
inline size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return i;
    }
    // Overlong forms and surrogates are invalid too.
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      return i;
    }
    i += n;
  }
  return std::string_view::npos;
}

}  // namespace exa
