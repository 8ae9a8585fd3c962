#pragma once

#include <string_view>

namespace exa {

// True when every character of `s` is an ASCII letter, a digit or one of `extra`: the rule for
// names that end up in logs, file names and labels (node ids, certificate names, request ids).
inline bool OnlyAlnumOr(std::string_view s, std::string_view extra) {
  for (char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && extra.find(c) == std::string_view::npos) return false;
  }
  return true;
}

}  // namespace exa
