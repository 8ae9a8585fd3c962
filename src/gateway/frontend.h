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

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/schema.h"
#include "engine/request.h"
#include "engine/tokenizer_detokenizer.h"
#include "gateway/api_keys.h"
#include "gateway/version_routes.h"
#include "metrics/registry.h"
#include "nlohmann/json.hpp"
#include "router/replica_table.h"

namespace exa::gateway {

struct GatewayOptions {
  std::string routing_policy = "kv-token-aware";
  int max_in_flight = 1024;      // requests this gateway holds open; beyond: 429
  int default_max_tokens = 256;  // when the request names none
  int max_tokens_limit = 4096;   // largest max_tokens accepted
  config::Bytes max_prompt_bytes{256 << 10};
  std::string api_keys_file;  // empty: the public API is open
  // Requests under different API keys never share prefix-cache blocks
  // (docs/architecture.md#prefix-cache: a cache hit is faster, which tells one tenant what
  // another sent). Without API keys every request is the same tenant.
  bool isolate_prefix_cache = true;
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
  std::vector<std::string> stop;
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
};

using EventSink = std::function<void(const engine::StreamEvent&)>;

// One admitted request. Its sink sees every token and exactly one final event.
class Call {
 public:
  // Frontend::Start creates calls, on the replica it chose.
  explicit Call(std::string replica_id) : replica_id_(std::move(replica_id)) {}
  void Cancel();
  const std::string& request_id() const { return request_id_; }
  // The replica serving the request now (a retry before the first token moves it).
  std::string replica_id() const {
    absl::MutexLock lock(&mu_);
    return replica_id_;
  }
  const std::string& model() const { return model_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }

 private:
  friend class Frontend;
  mutable absl::Mutex mu_;
  std::string replica_id_ ABSL_GUARDED_BY(mu_);
  std::string request_id_, model_, version_;
  int32_t prompt_tokens_ = 0;
  ReplicaBackend* backend_ = nullptr;
  std::atomic<int64_t> engine_id_{-1};
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> finished_{false};
  // Retry state; touched only by the backend's callbacks for this call, which never overlap.
  engine::GenerateRequest request_;  // without its callback: what a retry resubmits
  std::vector<std::string> tried_;
  std::map<std::string, std::string> labels_;  // version-route filter, kept for a retry
  bool any_token_ = false;
};

class Frontend {
 public:
  Frontend(GatewayOptions options, ReplicaBackend& backend, router::ReplicaTable& table,
           metrics::Registry& registry);

  // INVALID_ARGUMENT names the field; NOT_FOUND the model or version (and what exists);
  // RESOURCE_EXHAUSTED when over max_in_flight or the replica's queue is full; UNAVAILABLE when
  // no replica is ready.
  absl::StatusOr<std::shared_ptr<Call>> Start(TextRequest request, EventSink sink);

  std::vector<ModelView> Models() const { return backend_.Models(); }
  // Version routes (may be set once, before serving); without them no label filter applies.
  void SetRoutes(VersionRoutes* routes) { routes_ = routes; }
  std::vector<std::string> RouteHeaders() const {
    return routes_ ? routes_->Headers() : std::vector<std::string>{};
  }
  // Loads gateway.api_keys_file when set. Call before serving.
  absl::Status LoadApiKeys();
  // OK when no keys are configured or `authorization` carries a known key; else UNAUTHENTICATED.
  // The caller's tenant (its API key's name; "" when the API is open), or UNAUTHENTICATED.
  absl::StatusOr<std::string> Authorize(std::string_view authorization) const;

  // From now on new requests get UNAVAILABLE; admitted ones run to completion.
  void StartDraining() { draining_ = true; }
  // An auto node the election did not make a gateway refuses requests (UNAVAILABLE).
  void SetActive(bool active) { active_ = active; }
  int in_flight() const { return in_flight_.load(); }
  const GatewayOptions& options() const { return options_; }

 private:
  // The engine's request for `r` on `model`: tokens, max_tokens within the context, sampling,
  // stops and the effective cache salt. INVALID_ARGUMENT names the field.
  absl::StatusOr<engine::GenerateRequest> BuildEngineRequest(TextRequest& r,
                                                             const ModelView& model) const;
  absl::StatusOr<ModelView> ResolveModel(const TextRequest& request) const;
  engine::StreamCallback MakeCallback(std::shared_ptr<Call> call, EventSink sink,
                                      absl::Time admitted);
  // The table's choice for `route`; under kv-token-aware it hashes `request`'s prompt for the
  // prefix index (docs/architecture.md#routing).
  absl::StatusOr<std::string> Route(router::RouteRequest route,
                                    const engine::GenerateRequest& request);
  // After `call`'s replica failed before its first token: resubmits it to another replica.
  // False when the attempt or retry budget is spent or no other replica is ready.
  bool Retry(const std::shared_ptr<Call>& call, const engine::StreamCallback& callback);
  void LogFinished(const Call& call, const engine::StreamEvent& e, absl::Duration e2e);
  absl::Status Validate(const TextRequest& request) const;

  const GatewayOptions options_;
  ReplicaBackend& backend_;
  router::ReplicaTable& table_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> retries_in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> active_{true};
  std::unique_ptr<ApiKeys> api_keys_;
  VersionRoutes* routes_ = nullptr;
  metrics::Family<metrics::Counter>& requests_;
  metrics::Histogram& ttft_seconds_;
  metrics::Histogram& e2e_seconds_;
  metrics::Counter& prompt_tokens_total_;
  metrics::Counter& completion_tokens_total_;
  metrics::Counter& auth_failures_;
  metrics::Family<metrics::Counter>& retries_;
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

}  // namespace exa::gateway
