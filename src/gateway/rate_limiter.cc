#include "gateway/rate_limiter.h"

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "common/strings.h"
#include "yaml-cpp/yaml.h"

namespace exa::gateway {
namespace {

// Far above any real limit, and far from int64 overflow when shares and charges are added.
constexpr int64_t kMaxPerMinute = 1'000'000'000'000;
constexpr std::string_view kLimitFields = "requests_per_minute, tokens_per_minute";

std::string Where(std::string_view source, const YAML::Node& node) {
  return StrCat(source, ":", node.Mark().line + 1);
}

absl::Status PerMinute(std::string_view source, const std::string& field, const YAML::Node& value,
                       int64_t* out) {
  const std::string text = value.IsScalar() ? value.Scalar() : std::string();
  int64_t v = -1;
  bool digits = !text.empty() && text.size() <= 13;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (digits) v = std::stoll(text);
  if (!digits || v > kMaxPerMinute) {
    return absl::InvalidArgumentError(StrCat(Where(source, value), ": ", field, ": \"", text,
                                             "\": expected a whole number from 0 (unlimited) to ",
                                             kMaxPerMinute));
  }
  *out = v;
  return absl::OkStatus();
}

absl::StatusOr<RateLimit> ParseLimit(std::string_view source, const std::string& where,
                                     const YAML::Node& node) {
  RateLimit limit;
  if (node.IsNull()) return limit;
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(StrCat(Where(source, node), ": ", where,
                                             ": expected a map of ", kLimitFields,
                                             ", e.g. {requests_per_minute: 60}"));
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string field = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
    const std::string path = StrCat(where, ".", field);
    if (!seen.insert(field).second) {
      return absl::InvalidArgumentError(
          StrCat(Where(source, kv.first), ": ", path, ": given twice"));
    }
    int64_t* out = field == "requests_per_minute" ? &limit.requests_per_minute
                   : field == "tokens_per_minute" ? &limit.tokens_per_minute
                                                  : nullptr;
    if (out == nullptr) {
      return absl::InvalidArgumentError(
          StrCat(Where(source, kv.first), ": ", path, ": unknown field; allowed: ", kLimitFields));
    }
    if (absl::Status s = PerMinute(source, path, kv.second, out); !s.ok()) return s;
  }
  return limit;
}

absl::Status ParseKeys(std::string_view source, const YAML::Node& node, RateLimits* out) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(StrCat(Where(source, node),
                                             ": keys: expected a map from API key names (as in "
                                             "gateway.api_keys_file) to limits"));
  }
  for (const auto& kv : node) {
    const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
    if (name.empty()) {
      return absl::InvalidArgumentError(
          StrCat(Where(source, kv.first), ": keys: a key name must be a non-empty string"));
    }
    auto limit = ParseLimit(source, StrCat("keys.", name), kv.second);
    if (!limit.ok()) return limit.status();
    if (!out->keys.emplace(name, *limit).second) {
      return absl::InvalidArgumentError(
          StrCat(Where(source, kv.first), ": keys.", name, ": given twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const RateLimit& RateLimits::For(std::string_view tenant) const {
  auto it = keys.find(absl::string_view(tenant.data(), tenant.size()));  // not std's here
  return it == keys.end() ? default_limit : it->second;
}

absl::StatusOr<RateLimits> ParseRateLimits(std::string_view text, std::string_view source) {
  RateLimits limits;
  try {
    YAML::Node root = YAML::Load(std::string(text));
    if (root.IsNull()) {  // also a file caught half-rewritten: it must not lift every limit
      return absl::InvalidArgumentError(
          StrCat(source, ": no limits; write \"default: {}\" for none"));
    }
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(
          StrCat(Where(source, root), ": expected a map with default and keys"));
    }
    std::set<std::string> seen;
    for (const auto& kv : root) {
      const std::string field = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
      if (!seen.insert(field).second) {
        return absl::InvalidArgumentError(
            StrCat(Where(source, kv.first), ": ", field, ": given twice"));
      }
      if (field == "default") {
        auto limit = ParseLimit(source, "default", kv.second);
        if (!limit.ok()) return limit.status();
        limits.default_limit = *limit;
      } else if (field == "keys") {
        if (absl::Status s = ParseKeys(source, kv.second, &limits); !s.ok()) return s;
      } else {
        return absl::InvalidArgumentError(StrCat(Where(source, kv.first), ": \"", field,
                                                 "\": unknown field; allowed: default, keys"));
      }
    }
  } catch (const YAML::Exception& e) {  // syntax errors, and nesting past yaml-cpp's depth guard
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
  }
  return limits;
}

absl::StatusOr<RateLimits> LoadRateLimitsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("rate limits file ", path, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseRateLimits(text.str(), path);
}

void SlidingWindow::Advance(int64_t now_second) {
  if (head_ != INT64_MIN && now_second <= head_) return;  // the same second (or a clock step back)
  if (head_ == INT64_MIN || now_second - head_ >= kBuckets) {
    counts_.fill(0);
    total_ = 0;
  } else {
    for (int64_t s = head_ + 1; s <= now_second; ++s) {
      total_ -= counts_[Index(s)];
      counts_[Index(s)] = 0;
    }
  }
  head_ = now_second;
}

int64_t SlidingWindow::Total(int64_t now_second) {
  Advance(now_second);
  return total_;
}

void SlidingWindow::Add(int64_t now_second, int64_t n) {
  Advance(now_second);
  counts_[Index(head_)] += n;
  total_ += n;
}

void SlidingWindow::Remove(int64_t charged_second, int64_t n, int64_t now_second) {
  Advance(now_second);
  if (charged_second > head_ || head_ - charged_second >= kBuckets || n <= 0) return;
  int64_t& bucket = counts_[Index(charged_second)];
  const int64_t taken = std::min(n, bucket);
  bucket -= taken;
  total_ -= taken;
}

absl::Duration SlidingWindow::UntilAtMost(int64_t target, absl::Time now) {
  const int64_t now_second = absl::ToUnixSeconds(now);
  Advance(now_second);
  if (total_ <= target) return absl::ZeroDuration();
  int64_t left = total_;
  for (int64_t s = head_ - kBuckets + 1; s <= head_; ++s) {
    left -= counts_[Index(s)];
    // Second s leaves the window when second s + kBuckets begins.
    if (left <= target) return absl::FromUnixSeconds(s + kBuckets) - now;
  }
  return absl::FromUnixSeconds(head_ + kBuckets) - now;  // not reached: left ends at 0
}

int64_t ShareOf(int64_t limit, int gateways) {
  const int64_t n = std::max(1, gateways);
  return limit <= 0 ? 0 : (limit + n - 1) / n;
}

std::string ResetText(absl::Duration d) {
  int64_t seconds = absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)));
  seconds = std::max<int64_t>(0, seconds);
  if (seconds < 60) return StrCat(seconds, "s");
  return StrCat(seconds / 60, "m", seconds % 60, "s");
}

std::vector<std::pair<std::string, std::string>> RateLimitHeaders(const RateLimitReport& r) {
  std::vector<std::pair<std::string, std::string>> h;
  if (r.requests_limited) {
    h.emplace_back("x-ratelimit-limit-requests", StrCat(r.limit_requests));
    h.emplace_back("x-ratelimit-remaining-requests", StrCat(r.remaining_requests));
    h.emplace_back("x-ratelimit-reset-requests", ResetText(r.reset_requests));
  }
  if (r.tokens_limited) {
    h.emplace_back("x-ratelimit-limit-tokens", StrCat(r.limit_tokens));
    h.emplace_back("x-ratelimit-remaining-tokens", StrCat(r.remaining_tokens));
    h.emplace_back("x-ratelimit-reset-tokens", ResetText(r.reset_tokens));
  }
  if (!r.refused.empty()) {
    const int64_t seconds = absl::ToInt64Seconds(absl::Ceil(r.retry_after, absl::Seconds(1)));
    h.emplace_back("Retry-After", StrCat(std::max<int64_t>(1, seconds)));
  }
  return h;
}

RateLimiter::RateLimiter(RateLimits limits) : limits_(std::move(limits)) {}

RateLimiter::Usage& RateLimiter::UsageFor(const std::string& tenant) {
  auto it = usage_.find(tenant);
  if (it != usage_.end()) return *it->second;
  if (usage_.size() >= kMaxTenants) return overflow_;
  return *usage_.emplace(tenant, std::make_unique<Usage>()).first->second;
}

void RateLimiter::Fill(Usage& usage, int64_t requests_share, int64_t tokens_share, absl::Time now,
                       RateLimitReport* report) {
  if (report == nullptr) return;
  const int64_t second = absl::ToUnixSeconds(now);
  report->requests_limited = requests_share > 0;
  report->limit_requests = requests_share;
  report->remaining_requests = std::max<int64_t>(0, requests_share - usage.requests.Total(second));
  report->reset_requests = usage.requests.UntilAtMost(0, now);
  report->tokens_limited = tokens_share > 0;
  report->limit_tokens = tokens_share;
  report->remaining_tokens = std::max<int64_t>(0, tokens_share - usage.tokens.Total(second));
  report->reset_tokens = usage.tokens.UntilAtMost(0, now);
}

absl::StatusOr<RateLimiter::Charge> RateLimiter::Admit(const std::string& tenant, int64_t tokens,
                                                       absl::Time now, RateLimitReport* report) {
  absl::MutexLock lock(&mu_);
  Usage& usage = UsageFor(tenant);
  const RateLimit& limit = limits_.For(tenant);
  const int64_t requests_share = ShareOf(limit.requests_per_minute, gateways_);
  const int64_t tokens_share = ShareOf(limit.tokens_per_minute, gateways_);
  const int64_t second = absl::ToUnixSeconds(now);
  const std::string share =
      gateways_ > 1 ? StrCat(" (this gateway's share of ", gateways_, " gateways)") : "";
  std::string refused;
  absl::Duration retry_after;
  if (requests_share > 0 && usage.requests.Total(second) + 1 > requests_share) {
    refused = "requests";
    retry_after = usage.requests.UntilAtMost(requests_share - 1, now);
  } else if (tokens_share > 0 && tokens > tokens_share) {
    Fill(usage, requests_share, tokens_share, now, report);
    return absl::InvalidArgumentError(
        StrCat("request of ", tokens, " tokens (prompt plus max_tokens) is over the limit of ",
               tokens_share, " tokens per minute", share, "; lower max_tokens"));
  } else if (tokens_share > 0 && usage.tokens.Total(second) + tokens > tokens_share) {
    refused = "tokens";
    retry_after = usage.tokens.UntilAtMost(tokens_share - tokens, now);
  }
  if (!refused.empty()) {
    Fill(usage, requests_share, tokens_share, now, report);
    if (report) report->refused = refused;
    if (report) report->retry_after = retry_after;
    const int64_t limit_value = refused == "requests" ? requests_share : tokens_share;
    return absl::ResourceExhaustedError(
        StrCat("rate limit reached on ", refused, " per minute: limit ", limit_value, share,
               refused == "tokens" ? StrCat(", requested ", tokens) : std::string(), "; retry in ",
               ResetText(retry_after)));
  }
  usage.requests.Add(second, 1);
  usage.tokens.Add(second, tokens);
  Fill(usage, requests_share, tokens_share, now, report);
  return Charge{&usage, second, tokens};
}

void RateLimiter::Peek(const std::string& tenant, absl::Time now, RateLimitReport* report) {
  absl::MutexLock lock(&mu_);
  const RateLimit& limit = limits_.For(tenant);
  Fill(UsageFor(tenant), ShareOf(limit.requests_per_minute, gateways_),
       ShareOf(limit.tokens_per_minute, gateways_), now, report);
}

absl::Time RateLimiter::Now() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

void RateLimiter::Refund(const Charge& charge, int64_t tokens, bool request, absl::Time now) {
  if (charge.usage == nullptr) return;
  absl::MutexLock lock(&mu_);
  const int64_t second = absl::ToUnixSeconds(now);
  charge.usage->tokens.Remove(charge.second, std::min(tokens, charge.tokens), second);
  if (request) charge.usage->requests.Remove(charge.second, 1, second);
}

void RateLimiter::SetLimits(RateLimits limits) {
  absl::MutexLock lock(&mu_);
  limits_ = std::move(limits);
}

RateLimits RateLimiter::limits() const {
  absl::MutexLock lock(&mu_);
  return limits_;
}

void RateLimiter::SetGateways(int n) {
  absl::MutexLock lock(&mu_);
  gateways_ = std::max(1, n);
}

int RateLimiter::gateways() const {
  absl::MutexLock lock(&mu_);
  return gateways_;
}

}  // namespace exa::gateway
