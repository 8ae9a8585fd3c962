// String building that works with std::string_view. (Debian's abseil is built with its own
// absl::string_view, so absl::StrCat does not take std::string_view; this does, and also
// absl::string_view, so call sites need not care which one they hold.)
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace exa {
namespace strings_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, const std::string& s) { out.append(s); }
inline void Append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, char c) { out.push_back(c); }
inline void Append(std::string& out, bool b) { out.append(b ? "true" : "false"); }
template <std::integral Int>
requires(!std::same_as<Int, bool> && !std::same_as<Int, char>) void Append(std::string& out,
                                                                           Int v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}
template <std::floating_point F>
void Append(std::string& out, F v) {
  fmt::format_to(std::back_inserter(out), "{}", v);
}

}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(out, args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (strings_internal::Append(*out, args), ...);
}

inline std::string_view StripWhitespace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

// Views an absl::string_view (e.g. absl::Status::message()) as a std::string_view.
inline std::string_view ToStd(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace exa
