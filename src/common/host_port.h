// The one check of a "host:port" address given by a user (a flag, a config key, an
// environment variable), so that every place that takes one refuses the same things the same
// way, before anything dials or binds it.
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace exa {

// "" when `address` is HOST:PORT or [IPV6]:PORT with PORT in 1-65535 and a HOST without
// spaces or stray colons; else what is wrong, naming the value ("\"a:0\": port must be
// 1-65535").
std::string HostPortError(std::string_view address);

}  // namespace exa
