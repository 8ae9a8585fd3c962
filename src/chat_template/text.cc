#include "chat_template/text.h"

#include <cstdio>

#include "utf8proc.h"

namespace exa::chat_template {

bool IsJsWhitespace(uint32_t c) {
  if (c <= 32) return c == 32 || (c >= 9 && c <= 13);
  return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

uint32_t NextCodePoint(std::string_view s, size_t* pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(*pos);
  int extra = b0 < 0x80           ? 0
              : (b0 >> 5) == 0x6  ? 1
              : (b0 >> 4) == 0xE  ? 2
              : (b0 >> 3) == 0x1E ? 3
                                  : -1;
  if (extra < 0 || *pos + extra >= s.size() + (extra == 0 ? 1 : 0)) {
    ++*pos;
    return extra == 0 ? b0 : 0xFFFD;
  }
  uint32_t c = extra == 0 ? b0 : b0 & (0x3F >> extra);
  for (int i = 1; i <= extra; ++i) {
    if ((byte(*pos + i) & 0xC0) != 0x80) {
      ++*pos;
      return 0xFFFD;
    }
    c = (c << 6) | (byte(*pos + i) & 0x3F);
  }
  *pos += extra + 1;
  return c;
}

std::string_view TrimStart(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!IsJsWhitespace(NextCodePoint(s, &next))) break;
    pos = next;
  }
  return s.substr(pos);
}

std::string_view TrimEnd(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!IsJsWhitespace(NextCodePoint(s, &pos)) || pos != end) break;
    end = start;
  }
  return s.substr(0, end);
}

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    NextCodePoint(s, &pos);
    out.push_back(s.substr(start, pos - start));
  }
  return out;
}

int64_t Utf16Length(std::string_view s) {
  int64_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) n += NextCodePoint(s, &pos) >= 0x10000 ? 2 : 1;
  return n;
}

bool Utf16At(std::string_view s, int64_t index, std::string* out) {
  const int64_t length = Utf16Length(s);
  if (index < 0) index += length;
  if (index < 0 || index >= length) return false;
  int64_t unit = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    const int64_t width = NextCodePoint(s, &pos) >= 0x10000 ? 2 : 1;
    if (index < unit + width) {
      *out = width == 2 ? "\xEF\xBF\xBD" : std::string(s.substr(start, pos - start));
      return true;
    }
    unit += width;
  }
  return false;
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string JsUpper(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint32_t c = NextCodePoint(s, &pos);
    if (c == 0xDF) {  // SpecialCasing: ß upper-cases to two letters
      out.append("SS");
      continue;
    }
    AppendUtf8(static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))), &out);
  }
  return out;
}

std::string JsLower(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint32_t c = NextCodePoint(s, &pos);
    if (c == 0x130) {  // SpecialCasing: İ lower-cases to i and a combining dot
      out.append("i\xCC\x87");
      continue;
    }
    AppendUtf8(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), &out);
  }
  return out;
}

std::string JsTitle(std::string_view s) {
  std::string out(s);
  bool prev_word = false;
  for (char& c : out) {
    const bool word =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (word && !prev_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    prev_word = word;
  }
  return out;
}

std::string JsCapitalize(std::string_view s) {
  if (s.empty()) return "";
  size_t pos = 0;
  NextCodePoint(s, &pos);
  return JsUpper(s.substr(0, pos)) + std::string(s.substr(pos));
}

namespace {

void AppendUnit(uint32_t unit, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", unit & 0xFFFF);
  out->append(buf);
}

}  // namespace

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const uint32_t c = NextCodePoint(s, &pos);
    switch (c) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\b':
        out->append("\\b");
        continue;
      case '\f':
        out->append("\\f");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      AppendUnit(c, out);
    } else if (ensure_ascii && c >= 0x10000) {
      AppendUnit(0xD800 + ((c - 0x10000) >> 10), out);
      AppendUnit(0xDC00 + ((c - 0x10000) & 0x3FF), out);
    } else if (ensure_ascii && c >= 0x7F) {
      AppendUnit(c, out);
    } else {
      out->append(s.substr(start, pos - start));
    }
  }
  out->push_back('"');
}

std::vector<std::string> SplitOnWhitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> out;
  const std::string_view text = TrimStart(s);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    size_t next = pos;
    while (pos < text.size() && IsJsWhitespace(NextCodePoint(text, &next))) pos = next;
    start = pos;
    next = pos;
    while (pos < text.size() && !IsJsWhitespace(NextCodePoint(text, &next))) pos = next;
    if (pos == start) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.emplace_back(text.substr(start));
      break;
    }
    out.emplace_back(text.substr(start, pos - start));
  }
  return out;
}

std::vector<std::string> SplitOn(std::string_view s, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = s.find(sep); at != std::string_view::npos; at = s.find(sep, start)) {
    parts.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  parts.emplace_back(s.substr(start));
  if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) > maxsplit) {
    std::string rest;
    for (size_t i = static_cast<size_t>(maxsplit); i < parts.size(); ++i) {
      if (i > static_cast<size_t>(maxsplit)) rest.append(sep);
      rest.append(parts[i]);
    }
    parts.resize(static_cast<size_t>(maxsplit));
    parts.push_back(std::move(rest));
  }
  return parts;
}

std::string ReplaceAll(std::string_view s, std::string_view old_text, std::string_view new_text,
                       int64_t count) {
  std::string out;
  int64_t left = count < 0 ? INT64_MAX : count;
  if (old_text.empty()) {
    for (std::string_view cp : CodePoints(s)) {
      if (left-- > 0) out.append(new_text);
      out.append(cp);
    }
    if (left > 0) out.append(new_text);
    return out;
  }
  size_t start = 0;
  for (size_t at = s.find(old_text); at != std::string_view::npos && left > 0;
       at = s.find(old_text, start), --left) {
    out.append(s.substr(start, at - start));
    out.append(new_text);
    start = at + old_text.size();
  }
  out.append(s.substr(start));
  return out;
}

}  // namespace exa::chat_template
