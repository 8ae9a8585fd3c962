#include "gateway/frontend.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <random>

#include "absl/strings/cord.h"
#include "absl/time/clock.h"
#include "common/chars.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/prefix_hash.h"
#include "engine/structured/json_schema.h"
#include "gateway/chat_prompt.h"

namespace exa::gateway {
namespace {

uint64_t NewSeed() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

std::string PositiveInt(const int& v) { return v > 0 ? "" : StrCat(v, ": must be positive"); }

// The metric label of a tenant: its API key's name, "anonymous" for an open API.
std::string TenantLabel(const std::string& tenant) { return tenant.empty() ? "anonymous" : tenant; }

// What tells a rewritten rate limits file: its modification time and size ("" when unreadable).
std::string FileStamp(const std::string& path) {
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(path, ec);
  if (ec) return "";
  auto size = std::filesystem::file_size(path, ec);
  if (ec) return "";
  return StrCat(mtime.time_since_epoch().count(), "/", size);
}

// Status payloads are keyed by absl::string_view, which is not std::string_view here.
constexpr absl::string_view kFieldPayload = "type.exaserve.io/field";
constexpr absl::string_view kCodePayload = "type.exaserve.io/openai-code";

absl::Cord FieldCord(std::string_view field) {
  return absl::Cord(absl::string_view(field.data(), field.size()));
}

// A prompt's chained block hashes per cache namespace, made on first ask, for kv-token-aware
// routing (docs/architecture.md#routing). Replicas use 16-token blocks (the engine's default);
// a replica with another size simply matches nothing.
class PromptChains {
 public:
  static constexpr int32_t kBlockTokens = 16;

  PromptChains(std::span<const int32_t> tokens, std::string salt)
      : tokens_(tokens), salt_(std::move(salt)) {}

  // At least the first `blocks` hashes of the chain from `cache_namespace`'s root (fewer when
  // the prompt has fewer full blocks): hashed as the router asks, no deeper.
  std::span<const Hash128> For(const std::string& cache_namespace, size_t blocks) {
    if (cache_namespace.empty()) return {};  // a replica not reporting its cache yet
    Chain* chain = nullptr;
    for (Chain& c : chains_) {
      if (c.cache_namespace == cache_namespace) chain = &c;
    }
    if (chain == nullptr) {
      chain = &chains_.emplace_back();
      chain->cache_namespace = cache_namespace;
      chain->root = hasher_.Root(cache_namespace, salt_);
    }
    const size_t full = tokens_.size() / kBlockTokens;
    if (chain->hashes.size() < std::min(blocks, full)) {
      hasher_.Extend(chain->root, tokens_, kBlockTokens,
                     static_cast<int32_t>(std::min(blocks, full)), &chain->hashes);
    }
    return chain->hashes;
  }

  // Fills `route` to ask this object for hashes; it must outlive the route's use.
  void Attach(router::RouteRequest& route) {
    route.block_tokens = kBlockTokens;
    route.block_hashes = [this](const std::string& ns, size_t blocks) { return For(ns, blocks); };
  }

 private:
  std::span<const int32_t> tokens_;
  std::string salt_;
  engine::PrefixHasher hasher_;
  struct Chain {
    std::string cache_namespace;
    Hash128 root;
    std::vector<Hash128> hashes;
  };
  std::deque<Chain> chains_;
};

// The request's structured output (a schema, choices or a pattern: one at most), compiled onto
// `g`; a bad one is an error naming the field it came in.
absl::Status AttachConstraint(TextRequest& r, engine::GenerateRequest& g) {
  absl::StatusOr<std::shared_ptr<const engine::structured::Grammar>> grammar;
  if (!r.json_schema.empty()) {
    grammar = engine::structured::CompileJsonSchema(r.json_schema, r.json_prefix, r.json_suffix);
  } else if (!r.choices.empty()) {
    grammar = engine::structured::CompileChoice(r.choices);
  } else if (r.regex) {
    grammar = engine::structured::CompileRegexGrammar(*r.regex);
  } else {
    return absl::OkStatus();
  }
  if (!grammar.ok()) return FieldError(r.json_schema_field, ToStd(grammar.status().message()));
  g.grammar = *std::move(grammar);
  g.json_schema = std::move(r.json_schema);
  g.json_prefix = std::move(r.json_prefix);
  g.json_suffix = std::move(r.json_suffix);
  g.choices = std::move(r.choices);
  if (r.regex) g.regex = std::move(*r.regex);
  return absl::OkStatus();
}

}  // namespace

absl::Status FieldError(std::string_view field, std::string_view message) {
  absl::Status s = absl::InvalidArgumentError(StrCat(field, ": ", message));
  s.SetPayload(kFieldPayload, FieldCord(field));
  return s;
}

std::string ErrorField(const absl::Status& status) {
  auto field = status.GetPayload(kFieldPayload);  // absl::optional here
  return field ? std::string(*field) : std::string();
}

absl::Status WithErrorCode(absl::Status status, std::string_view code) {
  status.SetPayload(kCodePayload, FieldCord(code));
  return status;
}

std::string ErrorCode(const absl::Status& status) {
  auto code = status.GetPayload(kCodePayload);
  return code ? std::string(*code) : std::string();
}

bool ValidRequestId(std::string_view id) { return id.size() <= 128 && OnlyAlnumOr(id, "-_.:"); }

std::string NewRequestId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{:016x}", rng());
}

void RegisterConfig(config::Schema& s, std::string_view section, GatewayOptions* o) {
  std::string p(section);
  s.AddEnum(p + ".routing_policy", &o->routing_policy,
            {"kv-token-aware", "token-aware", "least-connections", "least-requests", "round-robin",
             "random"},
            "how the gateway picks a replica");
  s.Add<int>(p + ".max_in_flight", &o->max_in_flight,
             "requests open at once; beyond this: 429 / RESOURCE_EXHAUSTED", PositiveInt);
  s.Add<int>(p + ".default_max_tokens", &o->default_max_tokens,
             "max_tokens when a request gives none", PositiveInt);
  s.Add<int>(p + ".max_tokens_limit", &o->max_tokens_limit, "largest max_tokens accepted",
             PositiveInt);
  s.Add(p + ".max_prompt_bytes", &o->max_prompt_bytes, "largest prompt text accepted",
        config::Validator<config::Bytes>(config::PositiveBytes));
  s.Add(p + ".isolate_prefix_cache", &o->isolate_prefix_cache,
        "requests under different API keys never share prefix-cache blocks (a cache hit's "
        "timing would tell one tenant what another sent)");
  s.Add(p + ".api_keys_file", &o->api_keys_file,
        "file of SHA-256 hashes of API keys (exaserve-cli apikey new); empty: no auth");
  // Checked when set, so a bad file stops exaserved at start (exit 2) naming its line.
  s.Add(p + ".rate_limits_file", &o->rate_limits_file,
        "requests and tokens per minute per API key name, and a default (YAML; "
        "docs/operations.md#rate-limits); re-read when it changes; empty: no limits",
        config::Validator<std::string>([](const std::string& path) -> std::string {
          if (path.empty()) return "";
          auto limits = LoadRateLimitsFile(path);
          return limits.ok() ? "" : std::string(limits.status().message());
        }));
  s.Add<int>(p + ".max_resumes", &o->max_resumes,
             "times a request may continue on another replica after its replica failed "
             "mid-stream; 0 turns mid-stream failover off",
             [](const int& v) { return v >= 0 && v <= 16 ? "" : StrCat(v, ": expected 0-16"); });
  s.Add(p + ".stream_stall_timeout", &o->stream_stall_timeout,
        "a stream with no token for this long is resumed elsewhere; 0s: ten times the "
        "replica's inter-token P99, at least 2s",
        config::Validator<absl::Duration>([](const absl::Duration& d) {
          return d >= absl::ZeroDuration() ? "" : "must not be negative";
        }));
  s.Add(p + ".resume_deadline", &o->resume_deadline,
        "how long a broken stream waits for a ready replica to resume on",
        config::Validator<absl::Duration>(config::PositiveDuration));
  s.Add<int>(
      p + ".activation_queue", &o->activation.max_waiting,
      "requests held for models scaled to zero while a replica starts; beyond: 503",
      [](const int& v) { return v >= 0 && v <= 4096 ? "" : StrCat(v, ": expected 0-4096"); });
  s.Add(p + ".activation_timeout", &o->activation.timeout,
        "how long a request for a model scaled to zero waits for a replica before a 503",
        config::Validator<absl::Duration>(config::PositiveDuration));
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

void Call::Cancel() {
  cancel_requested_ = true;
  int64_t id = engine_id_.load();
  if (id >= 0 && !finished_) backend_->Cancel(replica_id(), static_cast<engine::RequestId>(id));
}

bool IsRetryable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kResourceExhausted ||
         status.code() == absl::StatusCode::kNotFound;
}

Frontend::Frontend(GatewayOptions options, ReplicaBackend& backend, router::ReplicaTable& table,
                   metrics::Registry& registry)
    : options_(std::move(options)),
      backend_(backend),
      table_(table),
      activator_(options_.activation, registry),
      requests_(registry.AddCounter("exaserve_gateway_requests_total",
                                    "Requests by outcome: ok, or the error code.", {"outcome"})),
      http_responses_(registry.AddCounter(
          "exaserve_gateway_http_responses_total",
          "OpenAI API responses by endpoint, model (a served model's name, or unknown) and HTTP "
          "status code (a stream counts its first status).",
          {"endpoint", "model", "code"})),
      ttft_seconds_(registry
                        .AddHistogram("exaserve_gateway_ttft_seconds",
                                      "Time from admission to the first token.", {},
                                      metrics::LatencyBucketsSeconds())
                        .WithLabels({})),
      e2e_seconds_(registry
                       .AddHistogram("exaserve_gateway_e2e_seconds",
                                     "Time from admission to the last token.", {},
                                     metrics::LatencyBucketsSeconds())
                       .WithLabels({})),
      prompt_tokens_total_(registry.SimpleCounter("exaserve_gateway_prompt_tokens_total",
                                                  "Prompt tokens admitted.")),
      completion_tokens_total_(
          registry.SimpleCounter("exaserve_gateway_completion_tokens_total", "Tokens generated.")),
      auth_failures_(registry.SimpleCounter("exaserve_gateway_auth_failures_total",
                                            "Requests refused for a missing or unknown API key.")),
      retries_(registry.AddCounter(
          "exaserve_gateway_retries_total",
          "Requests resubmitted after their replica failed before the first token, by outcome: "
          "sent, or refused (attempts, budget, no_replica).",
          {"outcome"})),
      resumes_(registry.AddCounter(
          "exaserve_gateway_resumes_total",
          "Requests continued on another replica after theirs failed mid-stream, by cause: "
          "stream_error, stalled, node_suspect (or the replica failed its health checks), "
          "ejected.",
          {"cause"})),
      resume_failures_(registry.AddCounter(
          "exaserve_gateway_resume_failures_total",
          "Mid-stream failures that reached the client as errors, by reason: attempts "
          "(gateway.max_resumes), budget, no_replica (none within gateway.resume_deadline).",
          {"reason"})),
      resume_gap_seconds_(registry
                              .AddHistogram("exaserve_gateway_resume_gap_seconds",
                                            "Time between the client's last token before a "
                                            "resume and its first token after it.",
                                            {}, metrics::LatencyBucketsSeconds())
                              .WithLabels({})),
      resume_prefill_tokens_(registry.SimpleCounter(
          "exaserve_gateway_resume_prefill_tokens_total",
          "Tokens prefilled again by resumed requests (prompt plus what was generated before "
          "the failure); not in the clients' usage.")),
      rate_limited_(registry.AddCounter(
          "exaserve_gateway_rate_limited_total",
          "Requests refused for their API key's rate limit (docs/operations.md#rate-limits), by "
          "key name (anonymous without API keys) and limit: requests or tokens (per minute).",
          {"key", "limit"})),
      rate_limit_reloads_(registry.AddCounter(
          "exaserve_gateway_rate_limit_reloads_total",
          "Times gateway.rate_limits_file was read again after it changed, by outcome: ok, or "
          "error (the old limits stay).",
          {"outcome"})),
      ttft_estimated_seconds_(
          registry
              .AddHistogram("exaserve_gateway_ttft_estimated_seconds",
                            "The router's estimate of the time to first token at admission: the "
                            "work ahead on the chosen replica, in seconds by the gateway's own "
                            "fit (first attempts, once the fit has 32 observations).",
                            {}, metrics::LatencyBucketsSeconds())
              .WithLabels({})),
      ttft_estimate_ratio_(registry
                               .AddHistogram("exaserve_gateway_ttft_estimate_ratio",
                                             "Actual / estimated time to first token, per "
                                             "request: how well routing's view predicts the wait.",
                                             {}, {0.25, 0.5, 0.67, 0.8, 0.9, 1.1, 1.25, 1.5, 2, 4})
                               .WithLabels({})) {
  registry.AddGaugeCallback(
      "exaserve_gateway_rate_limit_gateways",
      "Gateways sharing each API key's rate limits in this node's view: each enforces the limit "
      "over this many, rounded up.",
      [this] { return rate_limiter_ ? static_cast<double>(rate_limiter_->gateways()) : 1.0; });
  // Made here, filled by LoadApiKeys: the pointer never changes while requests read it.
  if (!options_.rate_limits_file.empty()) rate_limiter_ = std::make_unique<RateLimiter>();
  // Prefix-aware routing as this gateway saw it (docs/architecture.md#routing).
  registry.AddCounterCallback("exaserve_gateway_routing_decisions_total",
                              "Replicas chosen for requests (retries included).",
                              [this] { return static_cast<double>(table_.decisions().total); });
  registry.AddCounterCallback(
      "exaserve_gateway_routing_cache_hits_total",
      "Routing decisions whose chosen replica held part of the prompt, by the prefix index.",
      [this] { return static_cast<double>(table_.decisions().with_cache); });
  registry.AddCounterCallback(
      "exaserve_gateway_routed_prompt_tokens_total", "Prompt tokens of the routed requests.",
      [this] { return static_cast<double>(table_.decisions().prompt_tokens); });
  registry.AddCounterCallback(
      "exaserve_gateway_routed_cached_tokens_total",
      "Of the routed prompt tokens, those the chosen replica held in its prefix cache by the "
      "index: over the prompt tokens, this gateway's expected prefix hit ratio.",
      [this] { return static_cast<double>(table_.decisions().cached_tokens); });
  // The policy as a label, Prometheus' info-metric idiom: `exaserve-cli routing` groups the
  // gateways' decisions by it.
  registry
      .AddGauge("exaserve_gateway_routing_policy_info",
                "The routing policy this gateway routes by (gateway.routing_policy), as the "
                "policy label; always 1.",
                {"policy"})
      .WithLabels({std::string(router::PolicyName(table_.policy()))})
      .Set(1);
}

absl::StatusOr<router::ReplicaTable::Choice> Frontend::Route(router::RouteRequest route,
                                                             engine::GenerateRequest& request) {
  PromptChains chains(request.prompt_tokens, request.cache_salt);
  if (table_.policy() == router::Policy::kKvTokenAware) chains.Attach(route);
  absl::StatusOr<router::ReplicaTable::Choice> choice = table_.ChooseFor(route);
  if (choice.ok()) request.dispatch = choice->dispatch;
  return choice;
}

void Frontend::ObserveWait(const std::string& model, int64_t tokens_ahead, double seconds) {
  absl::MutexLock lock(&wait_mu_);
  router::WaitModel& m = wait_models_[model];  // bounded: the models the backend serves
  if (const double estimate = m.Predict(tokens_ahead); estimate > 0) {
    ttft_estimated_seconds_.Observe(estimate);
    ttft_estimate_ratio_.Observe(seconds / estimate);
  }
  m.Observe(tokens_ahead, seconds);
}

absl::Status Frontend::LoadApiKeys() {
  if (!options_.api_keys_file.empty()) {
    EXA_ASSIGN_OR_RETURN(api_keys_, ApiKeys::Load(options_.api_keys_file));
  }
  if (rate_limiter_) {
    rate_limits_stamp_ = FileStamp(options_.rate_limits_file);
    EXA_ASSIGN_OR_RETURN(RateLimits limits, LoadRateLimitsFile(options_.rate_limits_file));
    WarnUnknownKeys(limits);
    rate_limiter_->SetLimits(std::move(limits));
  }
  return absl::OkStatus();
}

RateLimitReport Frontend::RateLimitState(const std::string& tenant) {
  RateLimitReport report;
  if (rate_limiter_) rate_limiter_->Peek(tenant, RateLimiter::Now(), &report);
  return report;
}

void Frontend::SetGatewayCount(int n) {
  if (rate_limiter_) rate_limiter_->SetGateways(n);
}

bool Frontend::MayWaitForReplica(const absl::Status& refusal, std::string_view model) {
  return (absl::IsNotFound(refusal) || absl::IsUnavailable(refusal)) && WouldWaitForReplica(model);
}

bool Frontend::WouldWaitForReplica(std::string_view model) {
  return !draining_ && active_ && !model.empty() && activator_.Activatable(model) &&
         !table_.HasRoutable(model.substr(0, model.find('@')));
}

void Frontend::Tick(absl::Time now) {
  // Served: a replica is routable and the backend has the model's tokenizer.
  activator_.Tick(now, [this](const std::string& model) {
    return table_.HasRoutable(model) && FindModel(model).ok();
  });
  CheckStreams(now);
  PollRateLimits(now);
}

// Limits reload without a restart (docs/operations.md#rate-limits): a file whose stamp changed
// is read again; a bad one is logged once and the old limits stay.
void Frontend::PollRateLimits(absl::Time now) {
  if (!rate_limiter_ || now - rate_limits_polled_ < absl::Seconds(1)) return;
  rate_limits_polled_ = now;
  std::string stamp = FileStamp(options_.rate_limits_file);
  if (stamp == rate_limits_stamp_) return;
  rate_limits_stamp_ = stamp;
  absl::StatusOr<RateLimits> limits = LoadRateLimitsFile(options_.rate_limits_file);
  if (!limits.ok()) {
    rate_limit_reloads_.WithLabels({"error"}).Increment();
    EXA_LOG_ERROR(
        "gateway", "rate limits not reloaded; the previous limits stay",
        {{"file", options_.rate_limits_file}, {"error", ToStd(limits.status().message())}});
    return;
  }
  rate_limit_reloads_.WithLabels({"ok"}).Increment();
  EXA_LOG_INFO(
      "gateway", "rate limits reloaded",
      {{"file", options_.rate_limits_file}, {"keys", static_cast<int64_t>(limits->keys.size())}});
  WarnUnknownKeys(*limits);
  rate_limiter_->SetLimits(*std::move(limits));
}

void Frontend::WarnUnknownKeys(const RateLimits& limits) const {
  if (limits.keys.empty()) return;
  if (!api_keys_) {
    EXA_LOG_WARN("gateway",
                 "gateway.rate_limits_file names keys but gateway.api_keys_file is not set: only "
                 "the default applies, to all callers together",
                 {{"file", options_.rate_limits_file}});
    return;
  }
  std::vector<std::string> unknown;
  for (const auto& [name, limit] : limits.keys) {
    if (!api_keys_->HasName(name)) unknown.push_back(name);
  }
  if (unknown.empty()) return;
  std::sort(unknown.begin(), unknown.end());
  std::string names;
  for (const std::string& name : unknown) StrAppend(&names, names.empty() ? "" : ", ", name);
  EXA_LOG_WARN("gateway", "rate limits for key names gateway.api_keys_file does not have",
               {{"file", options_.rate_limits_file}, {"names", names}});
}

absl::StatusOr<RateLimiter::Charge> Frontend::ChargeRateLimit(const TextRequest& r,
                                                              const engine::GenerateRequest& g,
                                                              RateLimitReport* report) {
  if (!rate_limiter_) return RateLimiter::Charge{};
  RateLimitReport local;
  if (report == nullptr) report = &local;
  const int64_t tokens = static_cast<int64_t>(g.prompt_tokens.size()) + g.max_tokens;
  auto charge = rate_limiter_->Admit(r.tenant, tokens, RateLimiter::Now(), report);
  if (charge.ok()) return charge;
  const bool limited = charge.status().code() == absl::StatusCode::kResourceExhausted;
  requests_.WithLabels({limited ? "rate_limited" : "invalid_argument"}).Increment();
  rate_limited_.WithLabels({TenantLabel(r.tenant), limited ? report->refused : "tokens"})
      .Increment();
  // Larger than the limit itself: no wait helps, the caller must ask for fewer tokens.
  if (!limited) return FieldError(r.max_tokens_field, ToStd(charge.status().message()));
  return charge;
}

void Frontend::Release(const RateLimiter::Charge& charge) {
  in_flight_--;
  if (rate_limiter_) {
    rate_limiter_->Refund(charge, charge.tokens, /*request=*/true, RateLimiter::Now());
  }
}

absl::StatusOr<std::string> Frontend::Authorize(std::string_view authorization) const {
  if (!api_keys_) return std::string();
  absl::StatusOr<std::string> who = api_keys_->Check(authorization);
  if (!who.ok()) auth_failures_.Increment();
  return who;
}

absl::StatusOr<ModelView> Frontend::ResolveModel(const TextRequest& r) const {
  std::vector<ModelView> models = backend_.Models();
  if (models.empty()) return absl::UnavailableError("no model is served by this gateway");
  std::string available;
  for (const ModelView& m : models) {
    if ((r.model.empty() || m.name == r.model) && (r.version.empty() || m.version == r.version)) {
      return m;
    }
    StrAppend(&available, available.empty() ? "" : ", ", m.name, "@", m.version);
  }
  absl::Status s = absl::NotFoundError(
      r.version.empty() ? StrCat("model \"", r.model, "\": not served; available: ", available)
                        : StrCat("model \"", r.model, "\" version \"", r.version,
                                 "\": not served; available: ", available));
  s.SetPayload(kFieldPayload, FieldCord("model"));
  return WithErrorCode(std::move(s), "model_not_found");
}

absl::StatusOr<ModelView> Frontend::FindModel(std::string_view model) const {
  TextRequest r;
  r.model = std::string(model);
  // "NAME@VERSION", as the model list and errors print it: served names never hold an '@'.
  if (const size_t at = r.model.rfind('@'); at != std::string::npos) {
    r.version = r.model.substr(at + 1);
    r.model.resize(at);
  }
  return ResolveModel(r);
}

std::string Frontend::ModelLabel(std::string_view model) const {
  absl::StatusOr<ModelView> found = FindModel(model);
  return found.ok() ? found->name : "unknown";
}

void Frontend::CountResponse(std::string_view endpoint, const std::string& model_label,
                             int status) {
  http_responses_.WithLabels({std::string(endpoint), model_label, StrCat(status)}).Increment();
}

absl::Status Frontend::Validate(const TextRequest& r) const {
  if (r.prompt_tokens.empty() && r.prompt.empty()) {
    return FieldError(r.prompt_field, "must not be empty");
  }
  if (r.prompt.size() > options_.max_prompt_bytes.value) {
    return FieldError(r.prompt_field,
                      StrCat(r.prompt.size(), " bytes, larger than gateway.max_prompt_bytes (",
                             options_.max_prompt_bytes.value, ")"));
  }
  if (size_t bad = FindInvalidUtf8(r.prompt); bad != std::string_view::npos) {
    return FieldError(r.prompt_field, StrCat("invalid UTF-8 at byte ", bad));
  }
  if (r.max_tokens && (*r.max_tokens < 1 || *r.max_tokens > options_.max_tokens_limit)) {
    return FieldError(r.max_tokens_field,
                      StrCat(*r.max_tokens, " is outside [1, ", options_.max_tokens_limit, "]"));
  }
  const engine::SamplingParams& s = r.sampling;
  if (!(s.temperature >= 0 && s.temperature <= 2)) {
    return FieldError("temperature", StrCat(s.temperature, " is outside [0, 2]"));
  }
  if (!(s.top_p > 0 && s.top_p <= 1)) {
    return FieldError("top_p", StrCat(s.top_p, " is outside (0, 1]"));
  }
  if (s.top_k < 0) return FieldError("top_k", StrCat(s.top_k, " is negative"));
  if (!(s.min_p >= 0 && s.min_p <= 1)) {
    return FieldError("min_p", StrCat(s.min_p, " is outside [0, 1]"));
  }
  if (!(s.repetition_penalty > 0 && s.repetition_penalty <= 10)) {
    return FieldError("repetition_penalty", StrCat(s.repetition_penalty, " is outside (0, 10]"));
  }
  for (auto [field, v] : {std::pair{"presence_penalty", s.presence_penalty},
                          std::pair{"frequency_penalty", s.frequency_penalty}}) {
    if (!(v >= -2 && v <= 2)) return FieldError(field, StrCat(v, " is outside [-2, 2]"));
  }
  if (s.top_logprobs < 0 || s.top_logprobs > 20) {  // the engine's bound (engine/sampler.h)
    return FieldError("top_logprobs", StrCat(s.top_logprobs, " is outside [0, 20]"));
  }
  if (r.stop.size() > 8) return FieldError("stop", "at most 8 stop strings");
  if (r.stop_token_ids.size() > 64) return FieldError("stop_token_ids", "at most 64 token ids");
  for (const std::string& stop : r.stop) {
    // Each is matched against the text after every token: bounded, and never empty (an empty
    // one would end every completion at once).
    if (stop.empty() || stop.size() > 256) {
      return FieldError(
          "stop", StrCat("a stop string of ", stop.size(), " bytes; each must have 1 to 256"));
    }
  }
  // A caller's request id ends up in every node's logs: short and printable only. It comes
  // from the x-request-id header (HTTP) or the request_id field (gRPC).
  constexpr std::string_view kIdSource = " (the x-request-id header, or gRPC request_id)";
  if (r.cache_salt.size() > 256) {
    return FieldError("cache_salt", StrCat(r.cache_salt.size(), " bytes; at most 256"));
  }
  if (r.request_id.size() > 128) {
    return FieldError("request_id",
                      StrCat(r.request_id.size(), " characters; at most 128", kIdSource));
  }
  if (!ValidRequestId(r.request_id)) {
    return FieldError("request_id",
                      StrCat("only letters, digits, '-', '_', '.' and ':' are allowed", kIdSource));
  }
  return engine::ValidateSamplingParams(s);
}

absl::StatusOr<engine::GenerateRequest> Frontend::BuildEngineRequest(TextRequest& r,
                                                                     const ModelView& model) const {
  engine::GenerateRequest g;
  const bool caller_tokens = !r.prompt_tokens.empty();
  EXA_ASSIGN_OR_RETURN(g.prompt_tokens, PromptTokens(r, model, options_.max_prompt_bytes.value));
  if (g.prompt_tokens.empty()) return FieldError(r.prompt_field, "encodes to no tokens");
  if (caller_tokens && model.tokenizer) {
    // As vLLM checks them: an id the tokenizer cannot decode is the caller's error, not the
    // replica's.
    const int32_t vocab = model.tokenizer->tokenizer().vocab_size();
    for (size_t i = 0; i < g.prompt_tokens.size(); ++i) {
      if (g.prompt_tokens[i] >= vocab) {
        return FieldError("prompt", StrCat("token id ", g.prompt_tokens[i], " at position ", i,
                                           " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }
  // Without an explicit max_tokens, generate up to the default or to the end of the context,
  // whichever comes first; an explicit one over the context is the caller's error (engine).
  int32_t room = model.max_context - static_cast<int32_t>(g.prompt_tokens.size());
  // Validate bounded an explicit max_tokens by max_tokens_limit, an int.
  g.max_tokens = r.max_tokens ? static_cast<int32_t>(*r.max_tokens)
                              : std::max(1, std::min(options_.default_max_tokens, room));
  if (static_cast<int64_t>(g.prompt_tokens.size()) + g.max_tokens > model.max_context) {
    // Checked here too, not only by the engine: a remote replica would only fail the stream. At
    // fault is the prompt when it leaves no room for one token, else the max_tokens asked for.
    const bool prompt_at_fault = room < 1;
    absl::Status s = absl::InvalidArgumentError(
        StrCat(prompt_at_fault ? r.prompt_field : r.max_tokens_field, ": prompt of ",
               g.prompt_tokens.size(), " tokens plus ", r.max_tokens_field, " ", g.max_tokens,
               " exceeds the context length of ", model.max_context, " tokens"));
    s.SetPayload(kFieldPayload, FieldCord(prompt_at_fault ? r.prompt_field : r.max_tokens_field));
    return WithErrorCode(std::move(s), "context_length_exceeded");
  }
  g.sampling = r.sampling;
  g.stop_strings = std::move(r.stop);
  g.stop_token_ids = std::move(r.stop_token_ids);
  g.ignore_eos = r.ignore_eos;
  if (r.min_tokens > g.max_tokens) {
    return FieldError("min_tokens", StrCat(r.min_tokens, " is more than ", r.max_tokens_field, " ",
                                           g.max_tokens));
  }
  g.min_tokens = r.min_tokens;
  g.keep_special_tokens = r.keep_special_tokens;
  EXA_RETURN_IF_ERROR(AttachConstraint(r, g));
  // Length-prefixed, so no tenant and salt pair can spell another's.
  g.cache_salt = options_.isolate_prefix_cache
                     ? StrCat(r.tenant.size(), ":", r.tenant, r.cache_salt)
                     : r.cache_salt;
  return g;
}

absl::StatusOr<std::pair<ModelView, engine::GenerateRequest>> Frontend::Admit(TextRequest& r) {
  if (draining_) {
    requests_.WithLabels({"draining"}).Increment();
    return absl::UnavailableError("gateway is draining (shutting down); retry on another node");
  }
  if (!active_) {
    requests_.WithLabels({"not_gateway"}).Increment();
    return absl::UnavailableError(
        "this node is not an elected gateway; send requests to a gateway (exaserve-cli members "
        "lists roles)");
  }
  if (absl::Status s = Validate(r); !s.ok()) {
    requests_.WithLabels({"invalid_argument"}).Increment();
    return s;
  }
  // "NAME@VERSION", as the model list and errors print it (FindModel): served names never hold
  // an '@'.
  if (const size_t at = r.model.rfind('@'); r.version.empty() && at != std::string::npos) {
    r.version = r.model.substr(at + 1);
    r.model.resize(at);
  }
  auto model = ResolveModel(r);
  if (!model.ok()) {
    requests_.WithLabels({"not_found"}).Increment();
    return model.status();
  }
  auto built = BuildEngineRequest(r, *model);
  if (!built.ok()) {
    requests_.WithLabels({"invalid_argument"}).Increment();
    return built.status();
  }
  return std::make_pair(*std::move(model), *std::move(built));
}

absl::StatusOr<std::shared_ptr<Call>> Frontend::Start(TextRequest r, EventSink sink,
                                                      RateLimitReport* report) {
  auto admitted = Admit(r);
  if (!admitted.ok() && report != nullptr) *report = RateLimitState(r.tenant);
  EXA_RETURN_IF_ERROR(admitted.status());
  const ModelView* model = &admitted->first;
  engine::GenerateRequest g = std::move(admitted->second);
  // After parsing (the charge is known), before routing (docs/operations.md#rate-limits).
  EXA_ASSIGN_OR_RETURN(RateLimiter::Charge charge, ChargeRateLimit(r, g, report));
  if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
    Release(charge);
    requests_.WithLabels({"resource_exhausted"}).Increment();
    return absl::ResourceExhaustedError(
        StrCat("gateway at gateway.max_in_flight (", options_.max_in_flight, "); retry later"));
  }
  std::map<std::string, std::string> labels;
  if (routes_ != nullptr) labels = routes_->Labels(r.headers);
  // Without an explicit version any version may serve, subject to the version routes' labels.
  std::string version = r.version;
  auto replica =
      Route({model->name, version, static_cast<int64_t>(g.prompt_tokens.size()), {}, labels}, g);
  if (!replica.ok()) {
    Release(charge);
    requests_
        .WithLabels(
            {replica.status().code() == absl::StatusCode::kNotFound ? "not_found" : "unavailable"})
        .Increment();
    return replica.status();
  }
  // Every request samples with a seed, so a resumed one draws what it would have drawn
  // (docs/architecture.md#failover); the client learns the seed to replay it.
  if (!g.sampling.seed) g.sampling.seed = NewSeed();
  const std::string request_id = r.request_id.empty() ? NewRequestId() : r.request_id;
  g.request_id = request_id;
  // The call keeps the request without its callback, for a retry or a resume.
  auto call = std::make_shared<Call>(replica->replica, g, std::move(labels), std::move(sink));
  call->tokens_ahead_ = replica->tokens_ahead;
  call->request_id_ = request_id;
  call->model_ = model->name;
  call->version_ = version;
  call->prompt_tokens_ = static_cast<int32_t>(g.prompt_tokens.size());
  call->seed_ = *g.sampling.seed;
  call->tokenizer_ = model->tokenizer;
  call->backend_ = &backend_;
  call->rate_charge_ = charge;
  g.callback = AttemptCallback(call, 0);
  {
    absl::MutexLock lock(&calls_mu_);
    open_calls_.emplace(call.get(), call);
  }
  auto id = backend_.Submit(replica->replica, std::move(g));
  if (!id.ok()) {
    {
      absl::MutexLock lock(&calls_mu_);
      open_calls_.erase(call.get());
    }
    table_.Complete(replica->replica, replica->dispatch);
    Release(charge);
    requests_
        .WithLabels({id.status().code() == absl::StatusCode::kResourceExhausted
                         ? "resource_exhausted"
                         : "invalid_argument"})
        .Increment();
    return id.status();
  }
  // Unless a retry or resume already replaced this attempt (its failure can arrive first).
  int64_t unset = -1;
  call->engine_id_.compare_exchange_strong(unset, static_cast<int64_t>(*id));
  if (call->cancel_requested_) call->Cancel();
  return call;
}

engine::StreamCallback Frontend::AttemptCallback(std::shared_ptr<Call> call, int attempt) {
  return [this, call = std::move(call), attempt](const engine::StreamEvent& e) {
    OnEvent(call, attempt, e);
  };
}

// One line per finished request, keyed by its request id (the node that served it logs the same
// id): debug when it succeeded, warn when it failed, so `--log-level debug` traces every request
// and the default level still shows every failure.
void Frontend::LogFinished(const Call& call, const engine::StreamEvent& e, absl::Duration e2e) {
  if (e.status.ok() || call.cancel_requested_) {  // done, or its client went away
    EXA_LOG_DEBUG("gateway", e.status.ok() ? "request finished" : "request cancelled by its client",
                  {{"request_id", call.request_id()},
                   {"model", call.model()},
                   {"replica", call.replica_id()},
                   {"attempts", call.tried_.size()},
                   {"resumes", call.resumes_},
                   {"prompt_tokens", e.prompt_tokens},
                   {"completion_tokens", e.completion_tokens},
                   {"e2e_ms", absl::ToInt64Milliseconds(e2e)}});
  } else {
    EXA_LOG_WARN("gateway", "request failed",
                 {{"request_id", call.request_id()},
                  {"model", call.model()},
                  {"replica", call.replica_id()},
                  {"attempts", call.tried_.size()},
                  {"resumes", call.resumes_},
                  {"completion_tokens", e.completion_tokens},
                  {"e2e_ms", absl::ToInt64Milliseconds(e2e)},
                  {"error", ToStd(e.status.message())}});
  }
}

}  // namespace exa::gateway
