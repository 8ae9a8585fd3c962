#include "net/http_request.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include "common/chars.h"
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

// A header value compared case-insensitively, without its surrounding whitespace.
std::string Normalized(std::string_view v) { return AsciiLower(StripWhitespace(v)); }

// The value of `field` when the head has it, else nullopt (an empty value counts as present).
std::optional<std::string_view> Field(const internal::BeastRequest& head, http::field field) {
  auto it = head.find(field);
  if (it == head.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

HttpResponse JsonError(int status, std::string_view message, std::string_view param,
                       std::string_view code) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  nlohmann::json body = {
      {"error",
       {{"message", message},
        {"type", type},
        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
        {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}}}};
  HttpResponse r{status, "application/json", SafeDump(body) + "\n", {}};
  if (status == 429 || status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

namespace internal {

void ApplyLimits(const HttpParseLimits& limits, RequestParser* parser) {
  parser->body_limit(limits.max_body_bytes);
  // As HttpServer always did: a limit past 4 GiB wraps (no config sets one).
  parser->header_limit(static_cast<uint32_t>(limits.max_header_bytes));
}

std::optional<HttpResponse> CheckHead(const RequestParser& parser) {
  const BeastRequest& head = parser.get();
  if (head.version() == 11 && !Field(head, http::field::host)) {
    return JsonError(400, "malformed HTTP request: HTTP/1.1 needs a Host header");
  }
  if (auto te = Field(head, http::field::transfer_encoding)) {
    if (Normalized(*te) != "chunked") {
      return JsonError(501, StrCat("Transfer-Encoding \"", *te,
                                   "\" is not supported; send Content-Length or chunked alone"));
    }
  }
  if (auto ce = Field(head, http::field::content_encoding)) {
    if (Normalized(*ce) != "identity") {
      return JsonError(415, StrCat("Content-Encoding \"", *ce,
                                   "\" is not supported; send the body uncompressed"));
    }
  }
  const http::verb verb = head.method();
  if ((verb == http::verb::post || verb == http::verb::put || verb == http::verb::patch) &&
      !Field(head, http::field::content_length) && !Field(head, http::field::transfer_encoding)) {
    return JsonError(411, StrCat(head.method_string(),
                                 " needs a body with Content-Length (or Transfer-Encoding: "
                                 "chunked)"));
  }
  if (auto expect = Field(head, http::field::expect)) {
    if (Normalized(*expect) != "100-continue") {
      return JsonError(417, StrCat("Expect \"", *expect, "\": only 100-continue is supported"));
    }
  }
  return std::nullopt;
}

bool ExpectsContinue(const RequestParser& parser) {
  auto expect = Field(parser.get(), http::field::expect);
  return expect && Normalized(*expect) == "100-continue" && !parser.is_done();
}

HttpRequest ToHttpRequest(BeastRequest message) {
  HttpRequest req;
  req.version = static_cast<int>(message.version());
  req.method = std::string(message.method_string());
  req.target = std::string(message.target());
  size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& field : message) {
    req.headers.emplace_back(AsciiLower(field.name_string()), std::string(field.value()));
  }
  req.body = std::move(message.body());
  return req;
}

HttpResponse RejectionFor(boost::beast::error_code ec, const HttpParseLimits& limits) {
  if (ec == http::error::body_limit) {
    return JsonError(
        413,
        StrCat("request body larger than http.max_body_bytes (", limits.max_body_bytes, " bytes)"),
        "");
  }
  if (ec == http::error::header_limit) {
    return JsonError(431, StrCat("request head larger than http.max_header_bytes (",
                                 limits.max_header_bytes, " bytes)"));
  }
  return JsonError(400, StrCat("malformed HTTP request: ", ec.message()));
}

}  // namespace internal

HttpParseResult ParseHttpRequest(std::string_view bytes, const HttpParseLimits& limits) {
  HttpParseResult result;
  internal::RequestParser parser;
  internal::ApplyLimits(limits, &parser);
  boost::beast::error_code ec;
  size_t used = 0;
  bool head_checked = false;
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
    if (!head_checked && parser.is_header_done()) {
      // As the server does between reading the head and the body.
      head_checked = true;
      if (auto refusal = internal::CheckHead(parser)) {
        result.outcome = HttpParseResult::Outcome::kRejected;
        result.rejection = std::move(*refusal);
        return result;
      }
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
