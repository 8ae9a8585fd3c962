// Rate limits per API key on a gateway (docs/operations.md#rate-limits): requests per minute and
// tokens per minute for each key name of gateway.api_keys_file, a default for keys without their
// own (and, without API keys, for the one anonymous tenant), read from gateway.rate_limits_file.
//
// Window: each key's usage is kept in 61 one-second buckets; a request counts from its second
// until 61 seconds later, so it counts at least 60 s and at most 61 s. Whatever 60 s a client
// looks at, it got at most the limit through one gateway; it may wait up to 1 s longer than an
// exact sliding log would make it.
//
// Tokens: a request is charged its prompt tokens plus its max_tokens when admitted; when it ends,
// the tokens not generated are refunded into the second they were charged in (a charge that has
// left the window is not refunded: nothing of it counts any more).
//
// Gateways: with N gateways in this node's view each enforces its share, the limit / N rounded up
// (docs/operations.md#rate-limits gives the bounds).
//
// Thread safety: all methods may be called from any thread. The limiter's lock is a leaf: it is
// taken under the frontend's locks and never calls out.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace exa::gateway {

// 0: unlimited.
struct RateLimit {
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
  bool unlimited() const { return requests_per_minute == 0 && tokens_per_minute == 0; }
  bool operator==(const RateLimit&) const = default;
};

// gateway.rate_limits_file, parsed:
//   default: {requests_per_minute: 600, tokens_per_minute: 200000}
//   keys:
//     alice: {requests_per_minute: 60}   # absent or 0: unlimited
struct RateLimits {
  RateLimit default_limit;
  absl::flat_hash_map<std::string, RateLimit> keys;
  // `tenant`'s own limit, else the default ("" is the anonymous tenant of an open API).
  const RateLimit& For(std::string_view tenant) const;
  bool operator==(const RateLimits&) const = default;
};

// Errors name `source` (the file), the line and the field, and what is allowed.
absl::StatusOr<RateLimits> ParseRateLimits(std::string_view text, std::string_view source);
absl::StatusOr<RateLimits> LoadRateLimitsFile(const std::string& path);

// One key's usage in 61 one-second buckets (see the top of this file). Not thread-safe.
class SlidingWindow {
 public:
  static constexpr int kBuckets = 61;  // the 60 s window plus the second in progress
  int64_t Total(int64_t now_second);
  void Add(int64_t now_second, int64_t n);
  // Takes back up to `n` of what was added in `charged_second`; nothing once it left the window.
  void Remove(int64_t charged_second, int64_t n, int64_t now_second);
  // Seconds from `now` until the usage is at most `target`: 0 when it already is.
  absl::Duration UntilAtMost(int64_t target, absl::Time now);

 private:
  void Advance(int64_t now_second);
  static int Index(int64_t second) { return static_cast<int>(second % kBuckets); }

  std::array<int64_t, kBuckets> counts_{};
  int64_t head_ = INT64_MIN;  // the newest second counted
  int64_t total_ = 0;
};

// What a limited key is told on every response (OpenAI's x-ratelimit-* headers), and why a
// request was refused.
struct RateLimitReport {
  bool requests_limited = false;  // the key has a requests-per-minute limit: headers apply
  int64_t limit_requests = 0;     // this gateway's share
  int64_t remaining_requests = 0;
  absl::Duration reset_requests;  // until the window holds none of the key's requests
  bool tokens_limited = false;
  int64_t limit_tokens = 0;
  int64_t remaining_tokens = 0;
  absl::Duration reset_tokens;
  // Refused: "requests" or "tokens" (per minute), and when the request would fit.
  std::string refused;
  absl::Duration retry_after;
};

// Headers for `report` (none for an unlimited key); with Retry-After when it was refused.
std::vector<std::pair<std::string, std::string>> RateLimitHeaders(const RateLimitReport& report);

class RateLimiter {
 public:
  // Usage kept for at most this many tenants; any beyond share one more (they can only come from
  // an API keys file with more names than that).
  static constexpr size_t kMaxTenants = 65536;

  struct Usage {
    SlidingWindow requests, tokens;
  };
  // What Admit counted, for Refund. Default: nothing counted.
  struct Charge {
    Usage* usage = nullptr;
    int64_t second = 0;
    int64_t tokens = 0;
  };

  explicit RateLimiter(RateLimits limits = {});

  // Counts one request costing `tokens` (prompt + max_tokens) for `tenant` at `now`, or refuses
  // it: RESOURCE_EXHAUSTED naming the limit (report->refused, ->retry_after), INVALID_ARGUMENT
  // when `tokens` exceeds this gateway's tokens-per-minute share however long it waits.
  // `report` (optional) gets the key's state after the decision.
  absl::StatusOr<Charge> Admit(const std::string& tenant, int64_t tokens, absl::Time now,
                               RateLimitReport* report);
  // The key's state without counting anything.
  void Peek(const std::string& tenant, absl::Time now, RateLimitReport* report);
  // Takes back `tokens` of `charge` (not generated), and its request when `request` (it was
  // never served).
  void Refund(const Charge& charge, int64_t tokens, bool request, absl::Time now);

  void SetLimits(RateLimits limits);
  RateLimits limits() const;
  // The limiter's clock: monotonic, so a wall-clock step neither frees nor blocks a window.
  static absl::Time Now();
  // Gateways sharing the limits (this node's view); below 1 counts as 1.
  void SetGateways(int n);
  int gateways() const;

 private:
  Usage& UsageFor(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fill(Usage& usage, int64_t requests_share, int64_t tokens_share, absl::Time now,
            RateLimitReport* report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  RateLimits limits_ ABSL_GUARDED_BY(mu_);
  int gateways_ ABSL_GUARDED_BY(mu_) = 1;
  // Keyed by authenticated tenant names only (bounded by the API keys file and kMaxTenants).
  absl::flat_hash_map<std::string, std::unique_ptr<Usage>> usage_ ABSL_GUARDED_BY(mu_);
  Usage overflow_ ABSL_GUARDED_BY(mu_);
};

// A limit's share on one of `gateways` gateways: rounded up, 0 (unlimited) stays 0.
int64_t ShareOf(int64_t limit, int gateways);
// "7s", "1m1s": OpenAI's x-ratelimit-reset-* format, in whole seconds rounded up.
std::string ResetText(absl::Duration d);

}  // namespace exa::gateway
