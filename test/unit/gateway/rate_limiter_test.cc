// The rate limiter (docs/operations.md#rate-limits): a request counts for 60 to 61 s in its key's
// window and no 60 s ever admits more than the limit; unused max_tokens are refunded; N gateways
// each enforce the limit / N rounded up; new limits apply at once with the usage kept; a bad
// limits file is refused naming its line, the field and what is allowed.
#include "gateway/rate_limiter.h"

#include <catch2/catch.hpp>
#include <random>

#include "common/strings.h"

namespace exa::gateway {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

absl::Time At(double seconds) { return kStart + absl::Seconds(seconds); }

RateLimits Limits(int64_t requests, int64_t tokens) {
  RateLimits l;
  l.default_limit = {requests, tokens};
  return l;
}

std::string Header(const RateLimitReport& report, const std::string& name) {
  for (const auto& [k, v] : RateLimitHeaders(report)) {
    if (k == name) return v;
  }
  return "";
}

TEST_CASE("A request counts for at least 60 s and at most 61 s") {
  SlidingWindow w;
  w.Add(absl::ToUnixSeconds(At(0.9)), 5);
  CHECK(w.Total(absl::ToUnixSeconds(At(60.5))) == 5);  // 59.6 s later: still counted
  CHECK(w.Total(absl::ToUnixSeconds(At(60.99))) == 5);
  CHECK(w.Total(absl::ToUnixSeconds(At(61.0))) == 0);  // 60.1 s later: gone
  // UntilAtMost says when: the start of second 61.
  SlidingWindow v;
  v.Add(absl::ToUnixSeconds(At(0.9)), 5);
  v.Add(absl::ToUnixSeconds(At(10.2)), 3);
  CHECK(v.UntilAtMost(8, At(20)) == absl::ZeroDuration());
  CHECK(v.UntilAtMost(3, At(20)) == absl::Seconds(41));
  CHECK(v.UntilAtMost(0, At(20)) == absl::Seconds(51));
  // A long gap clears everything at once.
  CHECK(v.Total(absl::ToUnixSeconds(At(1000))) == 0);
}

TEST_CASE("No 60 s window admits more than the requests-per-minute limit") {
  RateLimiter limiter(Limits(60, 0));
  // A steady client asking 4 times a second for 5 minutes.
  int admitted_total = 0;
  std::vector<double> admitted_at;
  for (int i = 0; i < 4 * 300; ++i) {
    const double t = i * 0.25;
    if (limiter.Admit("", 1, At(t), nullptr).ok()) admitted_at.push_back(t);
  }
  admitted_total = static_cast<int>(admitted_at.size());
  for (size_t i = 0; i < admitted_at.size(); ++i) {
    size_t j = i;
    while (j < admitted_at.size() && admitted_at[j] < admitted_at[i] + 60) ++j;
    CHECK(j - i <= 60);
  }
  // And it is not much below: 60 every 61 s at worst.
  CHECK(admitted_total >= 60 * 300 / 61);
}

TEST_CASE("A refusal names the limit and says when the request fits") {
  RateLimiter limiter(Limits(3, 0));
  RateLimitReport r;
  for (double t : {0.5, 10.5, 20.5}) REQUIRE(limiter.Admit("alice", 1, At(t), &r).ok());
  CHECK(r.remaining_requests == 0);
  CHECK(r.limit_requests == 3);
  CHECK(r.reset_requests == absl::Seconds(60.5));  // the last leaves when second 81 begins
  auto refused = limiter.Admit("alice", 1, At(30.5), &r);
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.status().message().find("requests per minute: limit 3") != std::string::npos);
  CHECK(r.refused == "requests");
  CHECK(r.retry_after == absl::Seconds(30.5));  // the first leaves when second 61 begins
  CHECK(Header(r, "Retry-After") == "31");
  CHECK(Header(r, "x-ratelimit-limit-requests") == "3");
  CHECK(Header(r, "x-ratelimit-remaining-requests") == "0");
  CHECK(Header(r, "x-ratelimit-reset-requests") == "51s");
  CHECK(Header(r, "x-ratelimit-limit-tokens").empty());  // no token limit: no token headers
  CHECK(limiter.Admit("alice", 1, At(61), &r).ok());
  // Other keys have their own windows.
  CHECK(limiter.Admit("bob", 1, At(30.5), nullptr).ok());
}

TEST_CASE("Tokens are charged prompt plus max_tokens and what was not generated comes back") {
  RateLimiter limiter(Limits(0, 1000));
  RateLimitReport r;
  auto a = limiter.Admit("k", 600, At(0), &r);  // e.g. 100 prompt + 500 max_tokens
  REQUIRE(a.ok());
  CHECK(r.remaining_tokens == 400);
  auto b = limiter.Admit("k", 600, At(1), &r);
  REQUIRE(b.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(r.refused == "tokens");
  CHECK(b.status().message().find("tokens per minute: limit 1000, requested 600") !=
        std::string::npos);
  CHECK(r.retry_after == absl::Seconds(60));
  limiter.Refund(*a, 450, /*request=*/false, At(2));  // generated 50 of 500
  CHECK(limiter.Admit("k", 600, At(3), &r).ok());
  CHECK(r.remaining_tokens == 1000 - 150 - 600);
  // A refund never takes back more than its charge, even from a second shared with others.
  RateLimiter shared(Limits(0, 1000));
  auto x = shared.Admit("k", 300, At(0.1), nullptr);
  REQUIRE(shared.Admit("k", 300, At(0.2), nullptr).ok());
  REQUIRE(x.ok());
  shared.Refund(*x, 10'000, false, At(0.3));
  shared.Peek("k", At(0.4), &r);
  CHECK(r.remaining_tokens == 700);
  // A request larger than the limit could never pass: the caller's error, not a 429.
  auto too_big = limiter.Admit("k", 1001, At(5), &r);
  CHECK(too_big.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(too_big.status().message().find("lower max_tokens") != std::string::npos);
}

TEST_CASE("A refund after its charge left the window changes nothing") {
  RateLimiter limiter(Limits(0, 100));
  auto a = limiter.Admit("k", 100, At(0), nullptr);
  REQUIRE(a.ok());
  auto b = limiter.Admit("k", 100, At(61), nullptr);  // a has left the window
  REQUIRE(b.ok());
  limiter.Refund(*a, 100, false, At(62));  // must not free b's charge
  CHECK_FALSE(limiter.Admit("k", 1, At(63), nullptr).ok());
  // A request that was never served gives its request back too.
  RateLimiter requests(Limits(1, 0));
  auto c = requests.Admit("k", 1, At(0), nullptr);
  REQUIRE(c.ok());
  requests.Refund(*c, 1, /*request=*/true, At(0.5));
  CHECK(requests.Admit("k", 1, At(1), nullptr).ok());
}

TEST_CASE("N gateways each enforce the limit over N, rounded up") {
  CHECK(ShareOf(60, 1) == 60);
  CHECK(ShareOf(60, 2) == 30);
  CHECK(ShareOf(61, 2) == 31);
  CHECK(ShareOf(1, 3) == 1);
  CHECK(ShareOf(0, 3) == 0);    // unlimited stays unlimited
  CHECK(ShareOf(60, 0) == 60);  // below 1 counts as 1
  // Two gateways seeing the same clients: together at most the limit plus one (rounding).
  RateLimiter a(Limits(61, 0)), b(Limits(61, 0));
  a.SetGateways(2);
  b.SetGateways(2);
  int admitted = 0;
  for (int i = 0; i < 200; ++i) {
    RateLimiter& gw = i % 2 ? a : b;
    admitted += gw.Admit("k", 1, At(i * 0.1), nullptr).ok() ? 1 : 0;
  }
  CHECK(admitted == 62);
  RateLimitReport r;
  a.Peek("k", At(20), &r);
  CHECK(r.limit_requests == 31);
  auto refused = a.Admit("k", 1, At(20), &r);
  CHECK(refused.status().message().find("share of 2 gateways") != std::string::npos);
  // One gateway gone: the other's share is the whole limit at once, its usage kept.
  a.SetGateways(1);
  CHECK(a.gateways() == 1);
  a.Peek("k", At(20), &r);
  CHECK(r.limit_requests == 61);
  CHECK(r.remaining_requests == 30);
}

TEST_CASE("New limits apply at once and keep the usage counted") {
  RateLimiter limiter(Limits(10, 0));
  for (int i = 0; i < 5; ++i) REQUIRE(limiter.Admit("k", 1, At(i), nullptr).ok());
  limiter.SetLimits(Limits(5, 0));
  CHECK_FALSE(limiter.Admit("k", 1, At(6), nullptr).ok());
  RateLimits per_key = Limits(5, 0);
  per_key.keys["k"] = {20, 0};
  limiter.SetLimits(per_key);
  CHECK(limiter.Admit("k", 1, At(7), nullptr).ok());
  CHECK(limiter.limits() == per_key);
  // Unlimited keys get no headers.
  limiter.SetLimits({});
  RateLimitReport r;
  REQUIRE(limiter.Admit("k", 1, At(8), &r).ok());
  CHECK(RateLimitHeaders(r).empty());
}

TEST_CASE("The limits file: default, keys, and each key's own limit replacing the default") {
  auto limits = ParseRateLimits(
      "# comment\n"
      "default: {requests_per_minute: 600, tokens_per_minute: 200000}\n"
      "keys:\n"
      "  alice: {requests_per_minute: 60}\n"
      "  \"batch:1\":\n"
      "    tokens_per_minute: 0\n"
      "  open:\n",
      "limits.yaml");
  REQUIRE(limits.ok());
  CHECK(limits->For("") == RateLimit{600, 200000});
  CHECK(limits->For("nobody") == RateLimit{600, 200000});
  CHECK(limits->For("alice") == RateLimit{60, 0});
  CHECK(limits->For("batch:1").unlimited());
  CHECK(limits->For("open").unlimited());
  auto unlimited = ParseRateLimits("default: {}", "x");
  REQUIRE(unlimited.ok());
  CHECK(unlimited->default_limit.unlimited());
}

TEST_CASE("A bad limits file is refused naming the line, the field and what is allowed") {
  struct Case {
    std::string text, error;
  };
  const std::vector<Case> cases = {
      {"default: {requests_per_minute: -1}",
       "f.yaml:1: default.requests_per_minute: \"-1\": "
       "expected a whole number from 0 (unlimited) to"},
      {"default:\n  tokens_per_minute: 1.5", "f.yaml:2: default.tokens_per_minute: \"1.5\""},
      {"default: {requests_per_minute: 99999999999999}", "99999999999999"},
      {"default: {requests_per_minute: [1]}", "default.requests_per_minute: \"\""},
      {"default: {rpm: 1}",
       "f.yaml:1: default.rpm: unknown field; allowed: requests_per_minute, "
       "tokens_per_minute"},
      {"default: 5", "default: expected a map of requests_per_minute"},
      {"limits: {}", "f.yaml:1: \"limits\": unknown field; allowed: default, keys"},
      {"keys:\n  a: {requests_per_minute: 1}\n  a: {requests_per_minute: 2}",
       "f.yaml:3: keys.a: given twice"},
      {"default: {}\ndefault: {}", "f.yaml:2: default: given twice"},
      {"keys: [a, b]", "keys: expected a map from API key names"},
      {"- 1\n- 2", "f.yaml:1: expected a map with default and keys"},
      {"default: {requests_per_minute: 1", "f.yaml:1: invalid YAML"},
      {"default: {requests_per_minute: 1, requests_per_minute: 2}", "given twice"},
      // A file caught half-rewritten must not lift every limit.
      {"# nothing yet\n", "f.yaml: no limits; write \"default: {}\" for none"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto limits = ParseRateLimits(c.text, "f.yaml");
    REQUIRE_FALSE(limits.ok());
    CHECK(limits.status().message().find(c.error) != std::string::npos);
    INFO(limits.status().message());
  }
  auto missing = LoadRateLimitsFile("/nonexistent/limits.yaml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("/nonexistent/limits.yaml: cannot read") !=
        std::string::npos);
}

TEST_CASE("Any bytes in the limits file give limits or an error, never a crash") {
  const std::string seed =
      "default: {requests_per_minute: 600, tokens_per_minute: 200000}\n"
      "keys:\n  alice: {requests_per_minute: 60}\n  \"b\": {tokens_per_minute: 0}\n";
  std::mt19937 rng(7);  // seeded: the same mutations every run
  const std::string specials = "{}[]:,#&*!|>'\"%@`-? \n\t0123456789";
  for (size_t n = 0; n <= seed.size(); ++n) (void)ParseRateLimits(seed.substr(0, n), "f");
  for (int i = 0; i < 3000; ++i) {
    std::string text = seed;
    for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
      const size_t at = rng() % text.size();
      const char c = rng() % 2 ? specials[rng() % specials.size()] : static_cast<char>(rng());
      if (rng() % 3 == 0) {
        text.erase(at, 1);
      } else {
        text.insert(at, 1, c);
      }
    }
    (void)ParseRateLimits(text, "f");
  }
  // Nesting past yaml-cpp's depth guard is an error, not a stack overflow.
  auto deep = ParseRateLimits(std::string(100000, '['), "f");
  CHECK_FALSE(deep.ok());
}

TEST_CASE("Reset times read like OpenAI's") {
  CHECK(ResetText(absl::ZeroDuration()) == "0s");
  CHECK(ResetText(absl::Milliseconds(1)) == "1s");
  CHECK(ResetText(absl::Seconds(59)) == "59s");
  CHECK(ResetText(absl::Seconds(61)) == "1m1s");
  RateLimitReport r;
  r.refused = "tokens";
  r.retry_after = absl::Milliseconds(10);
  CHECK(Header(r, "Retry-After") == "1");  // never 0
}

}  // namespace
}  // namespace exa::gateway
