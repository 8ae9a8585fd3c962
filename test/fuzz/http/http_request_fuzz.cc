// libFuzzer entry for HTTP request parsing (net/http_request.h), the bytes a client sends to
// HttpServer: any input is a whole request, a prefix of one, or refused with a 400, 411, 413,
// 415, 417, 431 or 501 whose body is the JSON error clients parse. A whole request never claims
// more bytes than it was given, stays within the limits, has lowercased header names and a path and
// query that make up its target; pipelined requests after a keep-alive one parse the same way.
// Built with clang -fsanitize=fuzzer it fuzzes; in ctest its seed corpus and deterministic
// mutations run through corpus_test.cc.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz_limits.h"
#include "net/http_request.h"
#include "nlohmann/json.hpp"

namespace {

using exa::net::HttpParseResult;

void Fail(const char* why) {
  std::fprintf(stderr, "http fuzz: %s\n", why);
  std::abort();
}

void CheckRequest(const HttpParseResult& r, size_t available) {
  const exa::net::HttpRequest& req = r.request;
  if (r.consumed == 0 || r.consumed > available) Fail("consumed outside the input");
  if (req.body.size() > exa::net::fuzz::kFuzzLimits.max_body_bytes) Fail("body over the limit");
  if (req.method.empty()) Fail("empty method");
  const size_t q = req.target.find('?');
  if (req.path != req.target.substr(0, q)) Fail("path is not the target up to '?'");
  if (q != std::string::npos && req.query != req.target.substr(q + 1)) Fail("query mismatch");
  if (q == std::string::npos && !req.query.empty()) Fail("query without '?'");
  for (const auto& header : req.headers) {
    for (char c : header.first) {
      if (std::isupper(static_cast<unsigned char>(c))) Fail("header name not lowercased");
    }
  }
}

void CheckRejection(const HttpParseResult& r) {
  const int status = r.rejection.status;
  for (int allowed : {400, 411, 413, 415, 417, 431, 501}) {
    if (status == allowed) break;
    if (allowed == 501) Fail("rejection status not one of 400 411 413 415 417 431 501");
  }
  auto body = nlohmann::json::parse(r.rejection.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.contains("error") || !body["error"].contains("code") ||
      !body["error"].contains("param") || !body["error"].contains("type")) {
    Fail("rejection body is not the JSON error shape");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  // A kept-alive connection parses request after request from what is left.
  for (int i = 0; i < 16 && !rest.empty(); ++i) {
    HttpParseResult r = exa::net::ParseHttpRequest(rest, exa::net::fuzz::kFuzzLimits);
    if (r.outcome == HttpParseResult::Outcome::kRejected) {
      CheckRejection(r);
      return 0;
    }
    if (r.outcome == HttpParseResult::Outcome::kIncomplete) return 0;
    CheckRequest(r, rest.size());
    if (!r.keep_alive) return 0;
    rest.remove_prefix(r.consumed);
  }
  return 0;
}
