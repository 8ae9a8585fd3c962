// The gateway's request path, independent of the wire (docs/architecture.md#flows data plane):
// validate, tokenize with the model's own tokenizer, pick a replica with the router, submit, and
// stream the engine's events to the caller's sink. The OpenAI HTTP API and the gRPC Inference
// service are thin adapters over it.
//
// Thread safety: Start may be called from any thread. Sinks run on engine threads and must not
// block; Call::Cancel may be called from any thread, any number of times.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/schema.h"
#include "engine/request.h"
#include "engine/tokenizer_detokenizer.h"
#include "gateway/activator.h"
#include "gateway/api_keys.h"
#include "gateway/rate_limiter.h"
#include "gateway/version_routes.h"
#include "metrics/registry.h"
#include "nlohmann/json.hpp"
#include "router/replica_table.h"
#include "router/wait_model.h"

namespace exa::gateway {

struct GatewayOptions {
  std::string routing_policy = "kv-token-aware";
  int max_in_flight = 1024;      // requests this gateway holds open; beyond: 429
  int default_max_tokens = 256;  // when the request names none
  int max_tokens_limit = 4096;   // largest max_tokens accepted
  config::Bytes max_prompt_bytes{256 << 10};
  std::string api_keys_file;  // empty: the public API is open
  // Requests and tokens per minute per API key (gateway/rate_limiter.h); empty: no limits.
  std::string rate_limits_file;
  // Requests under different API keys never share prefix-cache blocks
  // (docs/architecture.md#prefix-cache: a cache hit is faster, which tells one tenant what
  // another sent). Without API keys every request is the same tenant.
  bool isolate_prefix_cache = true;
  // Mid-stream failover (docs/architecture.md#failover): a request whose replica fails after
  // its first token continues on another replica, at most this many times.
  int max_resumes = 2;
  // A stream with no token for this long counts as broken and is resumed elsewhere; zero: ten
  // times the replica's inter-token P99, and at least 2 s.
  absl::Duration stream_stall_timeout = absl::ZeroDuration();
  // How long a broken stream waits for a ready replica to resume on before it fails.
  absl::Duration resume_deadline = absl::Seconds(5);
  // Scale from zero (gateway/activator.h): requests held for models with no ready replica.
  ActivatorOptions activation;
};

void RegisterConfig(config::Schema& schema, std::string_view section, GatewayOptions* options);

// A model@version the gateway can route to, with what it needs to tokenize for it.
struct ModelView {
  std::string name;
  std::string version;
  std::shared_ptr<const engine::TokenizerDetokenizer> tokenizer;
  int32_t max_context = 0;
};

// Where replicas live: in this process today (the node agent), over Node.Generate later.
class ReplicaBackend {
 public:
  virtual ~ReplicaBackend() = default;
  virtual std::vector<ModelView> Models() const = 0;
  virtual absl::StatusOr<engine::RequestId> Submit(const std::string& replica_id,
                                                   engine::GenerateRequest request) = 0;
  virtual void Cancel(const std::string& replica_id, engine::RequestId id) = 0;
};

struct TextRequest {
  std::string model;    // empty: the only (or first) model served
  std::string version;  // empty: any version
  std::string prompt;   // used when prompt_tokens is empty
  std::vector<int32_t> prompt_tokens;
  engine::SamplingParams sampling;
  // Unset: default_max_tokens, capped by the context left. 64-bit so that a value past the
  // engine's 32 bits is refused as sent.
  std::optional<int64_t> max_tokens;
  std::string max_tokens_field = "max_tokens";  // as the caller named it, for errors
  // The field that holds the prompt, for errors: "prompt", or "messages" for a chat request.
  std::string prompt_field = "prompt";
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // besides the model's end-of-sequence ids
  bool ignore_eos = false;              // the end-of-sequence ids do not end the completion
  int32_t min_tokens = 0;            // vLLM's: no end (ids or stop strings) before this many tokens
  bool keep_special_tokens = false;  // the text keeps special tokens (vLLM's skip_special_tokens)
  // Structured output: a JSON Schema's text (engine/structured/json_schema.h); empty: free text.
  // Errors name `json_schema_field` (response_format, guided_json or json_schema).
  std::string json_schema;
  std::string json_prefix, json_suffix;  // text around the value (a forced tool call's tags)
  std::string json_schema_field = "response_format";
  // Or vLLM's guided_choice (engine/structured/json_schema.h CompileChoice); errors name
  // json_schema_field.
  std::vector<std::string> choices;
  // Or vLLM's guided_regex (engine/structured/regex.h); errors name json_schema_field.
  std::optional<std::string> regex;
  // tool_choice "required" (an empty name: any of the tools) or a named function: the chat
  // prompt's builder turns it into json_schema for the model's call format.
  std::optional<std::string> forced_tool;
  std::string request_id;  // empty: assigned
  // Prefix caching: the client's salt (at most 256 bytes) and the tenant the gateway
  // authenticated (its API key's name), which isolate_prefix_cache adds to the salt.
  std::string cache_salt;
  std::string tenant;
  // Values of the version-route headers the request carried (lower-case names).
  std::map<std::string, std::string> headers;
  // A chat request's {messages, add_generation_prompt, ...}: on a model with a chat template the
  // prompt is its rendering (gateway/chat_prompt.h); without one, `prompt` (the fallback).
  std::optional<nlohmann::ordered_json> chat;
  // The chat request's tools are in `chat` for the template (docs/reference/api.md#tool-calls):
  // the model's template must render them in a format the gateway parses.
  bool tools = false;
};

using EventSink = std::function<void(const engine::StreamEvent&)>;

// One admitted request. Its sink sees every token once, in order, and exactly one final event,
// however many replicas served it: a replica that fails before the first token is replaced
// (a retry), one that fails after it is replaced by a continuation on another replica (a resume;
// docs/architecture.md#failover).
class Call {
 public:
  // Frontend::Start creates calls, on the replica it chose, before any other thread sees them
  // (so without their locks: a caller may hold its own lock around Start that its sink takes).
  Call(std::string replica_id, engine::GenerateRequest request,
       std::map<std::string, std::string> labels, EventSink sink)
      : replica_id_(replica_id),
        sink_(std::move(sink)),
        admitted_(absl::Now()),
        request_(std::move(request)),
        tried_{std::move(replica_id)},
        labels_(std::move(labels)),
        last_event_at_(admitted_),
        dispatched_(true),
        dispatch_(request_.dispatch) {}
  void Cancel();
  const std::string& request_id() const { return request_id_; }
  // The replica serving the request now (a retry or a resume moves it).
  std::string replica_id() const {
    absl::MutexLock lock(&mu_);
    return replica_id_;
  }
  const std::string& model() const { return model_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }
  // The sampling seed: the client's, or the one the gateway drew (so the client can replay it).
  uint64_t seed() const { return seed_; }
  // The serving model's tokenizer (token strings for log-probabilities).
  const std::shared_ptr<const engine::TokenizerDetokenizer>& tokenizer() const {
    return tokenizer_;
  }

 private:
  friend class Frontend;
  // Which attempt is running where; the engine id of that attempt.
  mutable absl::Mutex mu_;
  std::string replica_id_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> engine_id_{-1};
  // Set once by Start, then read-only.
  std::string request_id_, model_, version_;
  int32_t prompt_tokens_ = 0;
  uint64_t seed_ = 0;
  std::shared_ptr<const engine::TokenizerDetokenizer> tokenizer_;
  int64_t tokens_ahead_ = 0;         // the router's view at admission (ReplicaTable::Choice)
  RateLimiter::Charge rate_charge_;  // refunded what was not generated when the call ends
  ReplicaBackend* backend_ = nullptr;
  EventSink sink_;
  absl::Time admitted_;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> finished_{false};
  // The stream as the client has it, and which attempt may add to it. Held while an event is
  // checked, recorded and handed to the sink, so events from an abandoned attempt never reach
  // the client and the sink sees one ordered stream. Taken before mu_, never the other way.
  absl::Mutex stream_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  int attempt_ ABSL_GUARDED_BY(stream_mu_) = 0;
  engine::GenerateRequest request_ ABSL_GUARDED_BY(stream_mu_);  // the first attempt's, uncalled
  std::vector<std::string> tried_ ABSL_GUARDED_BY(stream_mu_);
  std::map<std::string, std::string> labels_ ABSL_GUARDED_BY(stream_mu_);  // version routes
  std::vector<int32_t> sent_tokens_ ABSL_GUARDED_BY(stream_mu_);           // bounded by max_tokens
  uint64_t sent_text_bytes_ ABSL_GUARDED_BY(stream_mu_) = 0;
  absl::Time first_token_at_ ABSL_GUARDED_BY(stream_mu_) = absl::InfinitePast();
  absl::Time last_event_at_ ABSL_GUARDED_BY(stream_mu_);  // the attempt's start or last token
  int resumes_ ABSL_GUARDED_BY(stream_mu_) = 0;
  // Between a retry or resume and its attempt's first token: counted in the gateway's budget.
  bool reattempting_ ABSL_GUARDED_BY(stream_mu_) = false;
  absl::Time broken_at_ ABSL_GUARDED_BY(stream_mu_);  // the client's last token before a resume
  // A retry or resume waiting for a ready replica or the budget until then (paused, not failed).
  std::optional<absl::Time> resume_by_ ABSL_GUARDED_BY(stream_mu_);
  std::string resume_cause_ ABSL_GUARDED_BY(stream_mu_);
  absl::Status break_status_ ABSL_GUARDED_BY(stream_mu_);  // why the stream broke
  std::string refusal_ ABSL_GUARDED_BY(stream_mu_);        // why Replace refused, for metrics
  // An attempt whose replica looked bad but had no replacement: not checked again.
  int kept_attempt_ ABSL_GUARDED_BY(stream_mu_) = -1;
  bool done_ ABSL_GUARDED_BY(stream_mu_) = false;        // the final event was sent
  bool dispatched_ ABSL_GUARDED_BY(stream_mu_) = false;  // replica_id_ counts it in the table
  uint64_t dispatch_ ABSL_GUARDED_BY(stream_mu_) = 0;    // as which dispatch (Choice::dispatch)
  // Attempts to cancel once stream_mu_ is released (a backend may call back from Cancel).
  std::vector<std::pair<std::string, engine::RequestId>> to_cancel_ ABSL_GUARDED_BY(stream_mu_);
};

class Frontend {
 public:
  Frontend(GatewayOptions options, ReplicaBackend& backend, router::ReplicaTable& table,
           metrics::Registry& registry);

  // INVALID_ARGUMENT names the field; NOT_FOUND the model or version (and what exists);
  // RESOURCE_EXHAUSTED when over max_in_flight or the replica's queue is full; UNAVAILABLE when
  // no replica is ready.
  // RESOURCE_EXHAUSTED also over the API key's rate limit (`report`, when given, says which and
  // the key's state for the x-ratelimit-* headers, refused or not).
  absl::StatusOr<std::shared_ptr<Call>> Start(TextRequest request, EventSink sink,
                                              RateLimitReport* report = nullptr);

  std::vector<ModelView> Models() const { return backend_.Models(); }
  // The model a request naming `model` gets: "NAME", "NAME@VERSION" (as the model list and
  // errors print it) or "" (the first served). NOT_FOUND naming the field `model` (code
  // model_not_found) lists what is served; UNAVAILABLE when nothing is.
  absl::StatusOr<ModelView> FindModel(std::string_view model) const;
  // The `model` label of a request naming `model`: the served model's name, or "unknown" for a
  // name not served (so metric series stay as many as the models served).
  std::string ModelLabel(std::string_view model) const;
  // Counts an HTTP API response (exaserve_gateway_http_responses_total) by endpoint (one of the
  // API's routes), model label (ModelLabel) and status code.
  void CountResponse(std::string_view endpoint, const std::string& model_label, int status);
  // Version routes (may be set once, before serving); without them no label filter applies.
  void SetRoutes(VersionRoutes* routes) { routes_ = routes; }
  std::vector<std::string> RouteHeaders() const {
    return routes_ ? routes_->Headers() : std::vector<std::string>{};
  }
  // Loads gateway.api_keys_file and gateway.rate_limits_file when set. Call before serving.
  absl::Status LoadApiKeys();
  // `tenant`'s rate-limit state, for the headers of a response refused before Start.
  RateLimitReport RateLimitState(const std::string& tenant);
  // Rate-limit shares (docs/operations.md#rate-limits): the gateways in this node's view.
  void SetGatewayCount(int n);
  // OK when no keys are configured or `authorization` carries a known key; else UNAUTHENTICATED.
  // The caller's tenant (its API key's name; "" when the API is open), or UNAUTHENTICATED.
  absl::StatusOr<std::string> Authorize(std::string_view authorization) const;

  // From now on new requests get UNAVAILABLE; admitted ones run to completion.
  void StartDraining() { draining_ = true; }
  // An auto node the election did not make a gateway refuses requests (UNAVAILABLE).
  void SetActive(bool active) { active_ = active; }
  int in_flight() const { return in_flight_.load(); }
  const GatewayOptions& options() const { return options_; }
  // Requests held for models scaled to zero (gateway/activator.h); Tick resumes them.
  Activator& activator() { return activator_; }
  // Whether a request for `model` refused with `refusal` may wait for a replica to start: the
  // refusal says no replica serves it, none does now, and the model may be at zero replicas.
  bool MayWaitForReplica(const absl::Status& refusal, std::string_view model);
  // Whether a request for `model` would wait: no replica serves it now, and it may be at zero.
  bool WouldWaitForReplica(std::string_view model);

  // Finds the streams that broke without an error — stalled, or on a replica whose node is
  // suspected (or that fails its health checks) or that is ejected — and moves them elsewhere;
  // tries again those waiting for a replica or the budget, and fails them past
  // gateway.resume_deadline. The daemon calls it every 100 ms.
  void CheckStreams(absl::Time now);
  // The daemon's 100 ms tick: CheckStreams, and once a second gateway.rate_limits_file is read
  // again when its modification time or size changed (a bad file keeps the old limits).
  void Tick(absl::Time now);

 private:
  // The engine's request for `r` on `model`: tokens, max_tokens within the context, sampling,
  // stops and the effective cache salt. INVALID_ARGUMENT names the field.
  absl::StatusOr<engine::GenerateRequest> BuildEngineRequest(TextRequest& r,
                                                             const ModelView& model) const;
  absl::StatusOr<ModelView> ResolveModel(const TextRequest& request) const;
  // Draining, activity, validation, the model and the engine request, each refusal counted.
  absl::StatusOr<std::pair<ModelView, engine::GenerateRequest>> Admit(TextRequest& request);
  // Charges the tenant's rate limit for `g` (prompt plus max_tokens); a refusal is counted.
  absl::StatusOr<RateLimiter::Charge> ChargeRateLimit(const TextRequest& r,
                                                      const engine::GenerateRequest& g,
                                                      RateLimitReport* report);
  // A request admitted (in flight, charged) but not started: its place and charge go back.
  void Release(const RateLimiter::Charge& charge);
  void PollRateLimits(absl::Time now);
  // Logs the key names of `limits` that no API key has (a typo would leave a key on the
  // default), or that there are no API keys to name.
  void WarnUnknownKeys(const RateLimits& limits) const;
  // The callback of `call`'s attempt number `attempt`: its events count only while that is the
  // call's current attempt.
  engine::StreamCallback AttemptCallback(std::shared_ptr<Call> call, int attempt);
  void OnEvent(const std::shared_ptr<Call>& call, int attempt, const engine::StreamEvent& e);
  // The table's choice for `route`; under kv-token-aware it hashes `request`'s prompt for the
  // prefix index (docs/architecture.md#routing). Sets request.dispatch to the choice's number.
  absl::StatusOr<router::ReplicaTable::Choice> Route(router::RouteRequest route,
                                                     engine::GenerateRequest& request);
  // `call`'s attempt ended or was abandoned for `cause`: another attempt on another replica (a
  // retry before the first token, a resume after it). kSent: it runs; kWaiting: it waits for a
  // replica or the budget (CheckStreams tries again); kRefused: a bound is reached (the reason
  // in call->refusal_) — the call fails, unless its replica merely looked bad and keeps it.
  // `abandon`: the old attempt may still be running (stalled, suspected): it is cancelled.
  enum class Reattempt { kSent, kWaiting, kRefused };
  Reattempt Replace(const std::shared_ptr<Call>& call, std::string_view cause, bool abandon,
                    absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(call->stream_mu_);
  // Submits attempt number `attempt` of `call` (its continuation when tokens were sent) to a
  // replica other than those tried: where it went. UNAVAILABLE when none is ready. Changes
  // nothing in `call`.
  struct Sent {
    std::string replica;
    engine::RequestId id = 0;  // the backend's
    uint64_t dispatch = 0;     // the table's (ReplicaTable::Choice::dispatch)
  };
  absl::StatusOr<Sent> SubmitNext(const std::shared_ptr<Call>& call, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(call->stream_mu_);
  // Gives up `call`'s running attempt: its events no longer count; cancelled when `abandon`.
  void CommitBreak(Call& call, std::string_view cause, bool abandon)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(call.stream_mu_);
  // Counts why Replace refused (call.refusal_) under retries or resume failures.
  void CountRefusal(const Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(call.stream_mu_);
  // Why `call`'s running attempt must be given up although it has not failed; "" when it is fine.
  std::string BrokenCause(Call& call, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(call.stream_mu_);
  // Sends the call's one final event: `e`, with usage and timing as the client sees them.
  void FinishCall(Call& call, engine::StreamEvent e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(call.stream_mu_);
  void EndReattempt(Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(call.stream_mu_);
  void LogFinished(const Call& call, const engine::StreamEvent& e, absl::Duration e2e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(call.stream_mu_);
  absl::Status Validate(const TextRequest& request) const;

  const GatewayOptions options_;
  ReplicaBackend& backend_;
  router::ReplicaTable& table_;
  Activator activator_;
  std::atomic<int> in_flight_{0};
  // Calls between a retry or resume and its attempt's first token (the reattempt budget).
  std::atomic<int> reattempts_in_flight_{0};
  // Calls not finished yet, for CheckStreams; bounded by max_in_flight.
  absl::Mutex calls_mu_;
  absl::flat_hash_map<const Call*, std::shared_ptr<Call>> open_calls_ ABSL_GUARDED_BY(calls_mu_);
  std::atomic<bool> draining_{false};
  std::atomic<bool> active_{true};
  std::unique_ptr<ApiKeys> api_keys_;
  std::unique_ptr<RateLimiter> rate_limiter_;  // null: no gateway.rate_limits_file
  // The rate limits file as last read; only Tick (one thread: the daemon's timer) uses these.
  absl::Time rate_limits_polled_ = absl::InfinitePast();
  std::string rate_limits_stamp_;
  VersionRoutes* routes_ = nullptr;
  metrics::Family<metrics::Counter>& requests_;
  metrics::Family<metrics::Counter>& http_responses_;  // by endpoint, model and code
  metrics::Histogram& ttft_seconds_;
  metrics::Histogram& e2e_seconds_;
  metrics::Counter& prompt_tokens_total_;
  metrics::Counter& completion_tokens_total_;
  metrics::Counter& auth_failures_;
  metrics::Family<metrics::Counter>& retries_;
  metrics::Family<metrics::Counter>& resumes_;
  metrics::Family<metrics::Counter>& resume_failures_;
  metrics::Histogram& resume_gap_seconds_;
  metrics::Counter& resume_prefill_tokens_;
  metrics::Family<metrics::Counter>& rate_limited_;        // by key and limit
  metrics::Family<metrics::Counter>& rate_limit_reloads_;  // by outcome
  // Estimated vs actual time to first token (router/wait_model.h), per model.
  void ObserveWait(const std::string& model, int64_t tokens_ahead, double seconds)
      ABSL_LOCKS_EXCLUDED(wait_mu_);
  metrics::Histogram& ttft_estimated_seconds_;
  metrics::Histogram& ttft_estimate_ratio_;
  absl::Mutex wait_mu_;  // a leaf: taken under a call's stream_mu_
  absl::flat_hash_map<std::string, router::WaitModel> wait_models_ ABSL_GUARDED_BY(wait_mu_);
};

// A failure worth retrying on another replica when no token reached the client yet: the replica
// or its node went away, or its queue was full.
bool IsRetryable(const absl::Status& status);

// The HTTP status for a Status code, as the OpenAI API uses them.
int HttpStatusFor(absl::StatusCode code);

// INVALID_ARGUMENT about request field `field` (OpenAI's error `param`): the message is
// "FIELD: MESSAGE" and ErrorField gives the field back.
absl::Status FieldError(std::string_view field, std::string_view message);
// The field a FieldError names; "" for any other status.
std::string ErrorField(const absl::Status& status);
// `status` marked with OpenAI's error `code` (e.g. "context_length_exceeded",
// "model_not_found"); ErrorCode gives it back, "" when unmarked (the JSON then says null).
absl::Status WithErrorCode(absl::Status status, std::string_view code);
std::string ErrorCode(const absl::Status& status);

// A caller's request id (the x-request-id header, gRPC request_id) ends up in every node's logs:
// at most 128 characters, letters, digits, '-', '_', '.' and ':' only.
bool ValidRequestId(std::string_view id);
// A fresh request id: 16 hex digits.
std::string NewRequestId();

}  // namespace exa::gateway
