// A small HTTP/1.1 client on Boost.Beast for the observer: GET a node's /metrics, POST alerts to
// a webhook. One exchange per connection (Connection: close), every step under one deadline,
// the response body bounded. Plain HTTP only.
//
//   HttpFetch(io.context(), {.host = "10.0.0.7", .port = 8080, .target = "/metrics"},
//             [](absl::StatusOr<HttpClientResponse> r) { ... });
//
// Thread safety: HttpFetch may be called from any thread; `done` runs once, on an io thread, and
// must not block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace exa::net {

struct HttpClientRequest {
  std::string method = "GET";
  std::string host;  // a name or an address
  uint16_t port = 80;
  std::string target = "/";
  std::string body;
  std::string content_type;
  // The whole exchange: resolve, connect, send and read the response.
  absl::Duration timeout = absl::Seconds(5);
  size_t max_response_bytes = 16 << 20;
};

struct HttpClientResponse {
  int status = 0;
  std::string body;
};

using HttpClientCallback = std::function<void(absl::StatusOr<HttpClientResponse>)>;

// Runs one exchange on `io`. Errors: DEADLINE_EXCEEDED past the timeout, UNAVAILABLE when the
// host cannot be resolved or reached or the connection breaks, RESOURCE_EXHAUSTED for a
// response over max_response_bytes. Any HTTP status is a response, not an error.
void HttpFetch(boost::asio::io_context& io, HttpClientRequest request, HttpClientCallback done);

// Fills host, port and target from "http://host[:port][/path]"; INVALID_ARGUMENT otherwise
// (https is refused: TLS is not supported here).
absl::Status ParseHttpUrl(std::string_view url, HttpClientRequest* request);

}  // namespace exa::net
