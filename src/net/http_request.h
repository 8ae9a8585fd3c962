// An HTTP/1.1 request as handlers see it, the response they give, and the pure parser that turns
// a connection's bytes into one or the other (docs/architecture.md#module-map: parsers are pure
// leaves).
//
// ParseHttpRequest is what HttpServer does to the bytes of a connection, without the socket: the
// same Boost.Beast parser with the same limits, the same conversion into HttpRequest, and the
// same 4xx/501 answer for a request that must be refused. It exists so the parsing can be
// tested and fuzzed (test/fuzz/http) without a network.
//
// Thread safety: every function here is pure; call it from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exa::net {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query as sent
  std::string path;    // target without the query
  std::string query;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
  std::string remote_address;
  int version = 11;  // 10 for HTTP/1.0, 11 for HTTP/1.1

  // The first header named `name` (lowercase), or "".
  std::string_view Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// An error in the shape OpenAI clients parse: {"error":{"message", "type", "param", "code"}}.
// `type` follows from the status (invalid_request_error, authentication_error, not_found_error,
// rate_limit_error, server_error); `param` names the request field at fault and `code` is
// OpenAI's string code (e.g. "model_not_found"), each null when empty. 429 and 503 carry
// Retry-After.
HttpResponse JsonError(int status, std::string_view message, std::string_view param = {},
                       std::string_view code = {});

// The limits HttpServer reads a request under (http.max_body_bytes, http.max_header_bytes).
struct HttpParseLimits {
  uint64_t max_body_bytes = 1 << 20;
  uint64_t max_header_bytes = 16 << 10;  // Beast counts it in 32 bits: see ApplyLimits
};

// What the bytes at the front of a connection amount to.
struct HttpParseResult {
  enum class Outcome {
    kRequest,     // one whole request: `request`, `keep_alive`, `consumed`
    kIncomplete,  // a valid prefix; the server waits for more (or times out with 408)
    kRejected,    // refused: `rejection` (400, 411, 413, 415, 417, 431 or 501) is sent, then
                  // the connection closed
  };
  Outcome outcome = Outcome::kIncomplete;
  HttpRequest request;      // remote_address is left empty: there is no socket here
  bool keep_alive = false;  // the client may send another request on the connection
  size_t consumed = 0;      // bytes the request used; what follows starts the next request
  HttpResponse rejection;
};

// Parses the request at the front of `bytes`, as HttpServer would after receiving exactly them.
HttpParseResult ParseHttpRequest(std::string_view bytes, const HttpParseLimits& limits);

}  // namespace exa::net
