#include "engine/tokenizer/utf8.h"

#include <cstdint>

namespace exa::engine::utf8 {
namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// The allowed range of the second byte depends on the lead byte (Unicode Table 3-7): this is
// what rules out overlong forms, surrogates and code points past U+10FFFF.
bool SecondByteOk(uint8_t lead, uint8_t second) {
  switch (lead) {
    case 0xE0:
      return second >= 0xA0 && second <= 0xBF;
    case 0xED:
      return second >= 0x80 && second <= 0x9F;
    case 0xF0:
      return second >= 0x90 && second <= 0xBF;
    case 0xF4:
      return second >= 0x80 && second <= 0x8F;
    default:
      return IsContinuation(second);
  }
}

size_t ExpectedLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Number of bytes from s[i] that form a valid prefix of some UTF-8 sequence (at least 1 when
// s[i] is a valid lead byte), and whether that prefix is the complete sequence.
size_t ValidPrefixLength(std::string_view s, size_t i, bool* complete) {
  const auto lead = static_cast<uint8_t>(s[i]);
  const size_t expected = ExpectedLength(lead);
  *complete = false;
  if (expected == 0) return 0;
  size_t n = 1;
  while (n < expected && i + n < s.size()) {
    const auto b = static_cast<uint8_t>(s[i + n]);
    const bool ok = n == 1 ? SecondByteOk(lead, b) : IsContinuation(b);
    if (!ok) return n;
    ++n;
  }
  *complete = n == expected;
  return n;
}

}  // namespace

size_t ValidSequenceLength(std::string_view s, size_t i) {
  bool complete = false;
  const size_t n = ValidPrefixLength(s, i, &complete);
  return complete ? n : 0;
}

char32_t DecodeAt(std::string_view s, size_t i, size_t length) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (length == 1) return b0;
  char32_t cp = b0 & (0xFF >> (length + 1));
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

void Append(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = ValidSequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    bool complete = false;
    const size_t n = ValidPrefixLength(bytes, i, &complete);
    if (complete) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append(kReplacementUtf8);
      i += n == 0 ? 1 : n;
    }
  }
  return out;
}

bool EndsWithIncompleteSequence(std::string_view s) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can start an incomplete one.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = s.size(); i-- > from;) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (IsContinuation(b)) continue;
    bool complete = false;
    const size_t n = ValidPrefixLength(s, i, &complete);
    return !complete && n > 0 && i + n == s.size() && ExpectedLength(b) > 1;
  }
  return false;
}

bool IsWhitespace(char32_t c) {
  if (c >= 0x09 && c <= 0x0D) return true;
  switch (c) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

}  // namespace exa::engine::utf8
