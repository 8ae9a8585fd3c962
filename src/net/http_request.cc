#include "net/http_request.h"

#include <cctype>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include "common/strings.h"
#include "net/http_request_beast.h"
#include "nlohmann/json.hpp"

namespace exa::net {
namespace {

namespace http = boost::beast::http;

// Invalid UTF-8 from a client must not turn a JSON error body into an exception.
std::string SafeDump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

HttpResponse JsonError(int status, std::string_view message, std::string_view type) {
  nlohmann::json body = {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
  return HttpResponse{status, "application/json", SafeDump(body) + "\n", {}};
}

namespace internal {

void ApplyLimits(const HttpParseLimits& limits, RequestParser* parser) {
  parser->body_limit(limits.max_body_bytes);
  // As HttpServer always did: a limit past 4 GiB wraps (no config sets one).
  parser->header_limit(static_cast<uint32_t>(limits.max_header_bytes));
}

HttpRequest ToHttpRequest(BeastRequest message) {
  HttpRequest req;
  req.method = std::string(message.method_string());
  req.target = std::string(message.target());
  size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& field : message) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  req.body = std::move(message.body());
  return req;
}

HttpResponse RejectionFor(boost::beast::error_code ec, const HttpParseLimits& limits) {
  if (ec == http::error::body_limit) {
    return JsonError(
        413,
        StrCat("request body larger than http.max_body_bytes (", limits.max_body_bytes, " bytes)"),
        "invalid_request_error");
  }
  if (ec == http::error::header_limit) {
    return JsonError(431,
                     StrCat("request head larger than http.max_header_bytes (",
                            limits.max_header_bytes, " bytes)"),
                     "invalid_request_error");
  }
  return JsonError(400, StrCat("malformed HTTP request: ", ec.message()), "invalid_request_error");
}

}  // namespace internal

HttpParseResult ParseHttpRequest(std::string_view bytes, const HttpParseLimits& limits) {
  HttpParseResult result;
  internal::RequestParser parser;
  internal::ApplyLimits(limits, &parser);
  boost::beast::error_code ec;
  size_t used = 0;
  // Like http::read: feed the parser what is buffered until the message is done or it needs
  // bytes that have not arrived.
  while (!parser.is_done()) {
    if (used == bytes.size()) return result;  // kIncomplete
    size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) return result;
    if (ec) {
      result.outcome = HttpParseResult::Outcome::kRejected;
      result.rejection = internal::RejectionFor(ec, limits);
      return result;
    }
    if (n == 0 && !parser.is_done()) return result;
  }
  internal::BeastRequest message = parser.release();
  result.outcome = HttpParseResult::Outcome::kRequest;
  result.keep_alive = message.keep_alive();
  result.consumed = used;
  result.request = internal::ToHttpRequest(std::move(message));
  return result;
}

}  // namespace exa::net
