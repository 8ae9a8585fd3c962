// The limits the HTTP fuzz target parses under: small, so that inputs of a few kilobytes reach
// the 413 and 431 paths as well as whole requests.
#pragma once

#include "net/http_request.h"

namespace exa::net::fuzz {

inline constexpr HttpParseLimits kFuzzLimits{.max_body_bytes = 4096, .max_header_bytes = 1024};

}  // namespace exa::net::fuzz
