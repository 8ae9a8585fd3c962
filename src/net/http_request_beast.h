// The Boost.Beast half of http_request.h, shared by ParseHttpRequest and HttpServer's connections
// so that both configure the parser, convert what it parsed and refuse bad input the same way.
// Only net/ includes this header; everything else sees the plain types of http_request.h.
#pragma once

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

// The answer to a request the parser refused with `ec` (not a timeout or a closed connection):
// 413 over the body limit, 431 over the header limit, 400 for anything else malformed.
HttpResponse RejectionFor(boost::beast::error_code ec, const HttpParseLimits& limits);

}  // namespace exa::net::internal
