// Every seed of the HTTP request corpus (real API requests, pipelining, chunked bodies and the
// malformed, oversized and truncated requests HttpServer must refuse or wait on) parses as its
// name says. corpus_runner.cc runs them and their mutations through the fuzz target.
#include <catch2/catch.hpp>

#include "fuzz_corpus_params.h"
#include "fuzz_limits.h"
#include "support/fuzz_corpus.h"

namespace exa::net {
namespace {

// valid_* parse into a request, partial_* are a prefix of one, bad_<status>_* are refused.
void CheckSeed(const std::string& name, const std::string& seed) {
  INFO(name);
  HttpParseResult r = ParseHttpRequest(seed, fuzz::kFuzzLimits);
  if (name.rfind("valid_", 0) == 0) {
    CHECK(r.outcome == HttpParseResult::Outcome::kRequest);
  } else if (name.rfind("partial_", 0) == 0) {
    CHECK(r.outcome == HttpParseResult::Outcome::kIncomplete);
  } else if (name.rfind("bad_", 0) == 0) {
    REQUIRE(r.outcome == HttpParseResult::Outcome::kRejected);
    CHECK(std::to_string(r.rejection.status) == name.substr(4, 3));
  }
}

TEST_CASE("HTTP request fuzz seeds parse as their names say", "[fuzz]") {
  int files = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(exa::testing::fuzz_params::kCorpusDir)) {
    ++files;
    CheckSeed(name, seed);
  }
  CHECK(files >= 10);
}

TEST_CASE("Parsed requests carry what HttpServer's handlers see", "[fuzz]") {
  const std::string two =
      "POST /v1/completions?stream=1 HTTP/1.1\r\nHost: gw\r\nX-Request-ID: Ab\r\n"
      "Content-Length: 5\r\n\r\nhello"
      "GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n";
  HttpParseResult first = ParseHttpRequest(two, fuzz::kFuzzLimits);
  REQUIRE(first.outcome == HttpParseResult::Outcome::kRequest);
  CHECK(first.request.method == "POST");
  CHECK(first.request.path == "/v1/completions");
  CHECK(first.request.query == "stream=1");
  CHECK(first.request.Header("x-request-id") == "Ab");
  CHECK(first.request.body == "hello");
  CHECK(first.keep_alive);
  HttpParseResult second =
      ParseHttpRequest(std::string_view(two).substr(first.consumed), fuzz::kFuzzLimits);
  REQUIRE(second.outcome == HttpParseResult::Outcome::kRequest);
  CHECK(second.request.path == "/healthz");
  CHECK_FALSE(second.keep_alive);
  CHECK(second.consumed == two.size() - first.consumed);
}

}  // namespace
}  // namespace exa::net
