// The Boost.Beast half of http_request.h, shared by ParseHttpRequest and HttpServer's connections
// so that both configure the parser, convert what it parsed and refuse bad input the same way.
// Only net/ includes this header; everything else sees the plain types of http_request.h.
#pragma once

#include <optional>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include "net/http_request.h"

namespace exa::net::internal {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets the body and header limits on a fresh parser.
void ApplyLimits(const HttpParseLimits& limits, RequestParser* parser);

// The request a parsed message becomes: header names lowercased, the target split at '?'.
HttpRequest ToHttpRequest(BeastRequest message);

// Checks a parsed request head before its body is read; the refusal to send, or nullopt.
// Transfer-Encoding other than chunked: 501 (a coding we cannot undo would leave the body to be
// read as the next request). Content-Encoding other than identity: 415. A POST, PUT or PATCH
// with neither Content-Length nor chunked: 411. HTTP/1.1 without Host: 400. Expect other than
// 100-continue: 417.
std::optional<HttpResponse> CheckHead(const RequestParser& parser);

// Whether the client waits for "100 Continue" before sending the body (checked head).
bool ExpectsContinue(const RequestParser& parser);

// The answer to a request the parser refused with `ec` (not a timeout or a closed connection):
// 413 over the body limit, 431 over the header limit, 400 for anything else malformed.
HttpResponse RejectionFor(boost::beast::error_code ec, const HttpParseLimits& limits);

}  // namespace exa::net::internal
