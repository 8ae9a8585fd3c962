#include "common/host_port.h"

#include <algorithm>
#include <cctype>

#include "common/strings.h"

namespace exa {

std::string HostPortError(std::string_view address) {
  const std::string quoted = StrCat("\"", address, "\"");
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return StrCat(quoted, ": expected host:port");
  }
  std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return StrCat(quoted, ": expected [ipv6]:port");
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return StrCat(quoted, ": an IPv6 address goes in brackets, e.g. [::1]:7946");
  }
  if (std::any_of(host.begin(), host.end(), [](char c) {
        return std::isspace(static_cast<unsigned char>(c)) ||
               std::iscntrl(static_cast<unsigned char>(c));
      })) {
    return StrCat(quoted, ": the host has spaces or control characters");
  }
  if (port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return StrCat(quoted, ": port must be 1-65535");
  }
  const int number = std::stoi(std::string(port));
  if (number < 1 || number > 65535) return StrCat(quoted, ": port must be 1-65535");
  return "";
}

}  // namespace exa
