#include "gateway/inference_service.h"

#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "engine/rpc/generate_stream.h"
#include "net/grpc_status.h"

namespace exa::gateway {
namespace {

// A refusal for the API key's rate limit (docs/reference/api.md#rate-limits) tells the caller
// when to retry: `retry-after` trailing metadata, whole seconds, at least 1.
void AddRetryAfter(grpc::CallbackServerContext* context, const RateLimitReport& report) {
  for (const auto& [name, value] : RateLimitHeaders(report)) {
    if (name == "Retry-After") context->AddTrailingMetadata("retry-after", value);
  }
}

// A call that was not held (one that raced a replica's removal) for a model
// scaled to zero: the demand is counted (the gateway reports it, gateway/activator.h) and the
// call is told to retry after the replica's start. Other refusals pass through.
absl::Status RefuseWhileActivating(Frontend& frontend, grpc::CallbackServerContext* context,
                                   const absl::Status& refusal, const std::string& model) {
  if (!frontend.MayWaitForReplica(refusal, model)) return refusal;
  Activator& activator = frontend.activator();
  activator.NoteDemand(model, absl::Now());
  context->AddTrailingMetadata("retry-after", StrCat(activator.retry_after_s()));
  return absl::UnavailableError(StrCat("model ", model,
                                       " is scaled to zero; a replica is starting; retry after ",
                                       activator.retry_after_s(), " s"));
}

// Starts `request` on the frontend as the producer of a GenerateStreamReactor.
engine::rpc::GenerateStreamReactor::Starter FrontendStarter(Frontend& frontend,
                                                            grpc::CallbackServerContext* context,
                                                            TextRequest request) {
  return [&frontend, context, request = std::move(request)](
             engine::StreamCallback sink) mutable -> absl::StatusOr<engine::rpc::StreamHandle> {
    RateLimitReport report;
    const std::string model = request.model;
    absl::StatusOr<std::shared_ptr<Call>> started =
        frontend.Start(std::move(request), std::move(sink), &report);
    if (!started.ok()) AddRetryAfter(context, report);
    if (!started.ok()) return RefuseWhileActivating(frontend, context, started.status(), model);
    EXA_ASSIGN_OR_RETURN(std::shared_ptr<Call> call, std::move(started));
    engine::rpc::StreamHandle handle;
    handle.cancel = [call] { call->Cancel(); };
    handle.request_id = [call] { return call->request_id(); };
    handle.replica_id = [call] { return call->replica_id(); };
    handle.seed = [call] { return call->seed(); };
    return handle;
  };
}

}  // namespace

absl::StatusOr<TextRequest> FromProto(const exaserve::v1::GenerateRequest& p) {
  TextRequest r;
  r.model = p.model();
  r.version = p.version();
  if (p.has_prompt_tokens()) {
    r.prompt_tokens.assign(p.prompt_tokens().ids().begin(), p.prompt_tokens().ids().end());
  } else {
    r.prompt = p.prompt();
  }
  if (p.max_tokens() < 0) {
    return absl::InvalidArgumentError("max_tokens: must not be negative (0 uses the default)");
  }
  if (p.max_tokens() > 0) r.max_tokens = p.max_tokens();
  r.sampling = engine::rpc::SamplingFromProto(p.sampling());
  r.stop.assign(p.stop().begin(), p.stop().end());
  r.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  r.ignore_eos = p.ignore_eos();
  if (p.min_tokens() < 0) return absl::InvalidArgumentError("min_tokens: must not be negative");
  r.min_tokens = p.min_tokens();
  r.keep_special_tokens = p.keep_special_tokens();
  r.json_schema = p.json_schema();
  r.json_prefix = p.json_prefix();
  r.json_suffix = p.json_suffix();
  r.json_schema_field = "json_schema";
  r.choices.assign(p.choice().begin(), p.choice().end());
  if (!r.choices.empty()) {
    if (!r.json_schema.empty()) {
      return absl::InvalidArgumentError("choice: give json_schema or choice, not both");
    }
    r.json_schema_field = "choice";
  }
  if (!p.regex().empty()) {
    if (!r.json_schema.empty() || !r.choices.empty()) {
      return absl::InvalidArgumentError("regex: give one of json_schema, choice, regex");
    }
    r.regex = p.regex();
    r.json_schema_field = "regex";
  }
  r.request_id = p.request_id();
  r.cache_salt = p.cache_salt();
  return r;
}

std::string_view AuthorizationMetadata(const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

absl::StatusOr<TextRequest> InferenceService::Admit(
    grpc::CallbackServerContext* context, const exaserve::v1::GenerateRequest& request) const {
  EXA_ASSIGN_OR_RETURN(std::string tenant, frontend_.Authorize(AuthorizationMetadata(context)));
  EXA_ASSIGN_OR_RETURN(TextRequest text, FromProto(request));
  text.tenant = std::move(tenant);
  const auto& metadata = context->client_metadata();
  for (const std::string& name : frontend_.RouteHeaders()) {
    auto it = metadata.find(name);
    if (it != metadata.end())
      text.headers[name] = std::string(it->second.data(), it->second.size());
  }
  return text;
}

grpc::ServerWriteReactor<exaserve::v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const exaserve::v1::GenerateRequest* request) {
  auto* reactor = new engine::rpc::GenerateStreamReactor(request->sampling().logprobs(),
                                                         request->sampling().top_logprobs());
  auto text = Admit(context, *request);
  if (!text.ok()) {
    reactor->Begin([&](engine::StreamCallback) { return text.status(); });
    return reactor;
  }
  const std::string model = text->model;
  if (frontend_.WouldWaitForReplica(model)) {
    HoldForReplica(reactor, context, *std::move(text));
    return reactor;
  }
  reactor->Begin(FrontendStarter(frontend_, context, *std::move(text)));
  return reactor;
}

// The stream waits at the activator while a replica of its model starts (scale from zero,
// docs/architecture.md#autoscaling), then starts as any other; past the queue bound or the
// timeout it ends UNAVAILABLE with `retry-after`.
void InferenceService::HoldForReplica(engine::rpc::GenerateStreamReactor* reactor,
                                      grpc::CallbackServerContext* context, TextRequest text) {
  Activator& activator = frontend_.activator();
  const std::vector<std::pair<std::string, std::string>> retry = {
      {"retry-after", StrCat(activator.retry_after_s())}};
  reactor->Hold(context);
  const std::string model = text.model;
  absl::Status held = activator.Park(
      model, absl::Now(),
      {.resume =
           [this, reactor, context, text = std::move(text)] {
             reactor->Resume(FrontendStarter(frontend_, context, text));
           },
       .refuse = [reactor, retry](const absl::Status& s) { reactor->Refuse(s, retry); },
       .gone = [reactor] { return reactor->AbandonIfGone(); }});
  if (!held.ok()) reactor->Refuse(held, retry);
}

grpc::ServerUnaryReactor* InferenceService::Complete(grpc::CallbackServerContext* context,
                                                     const exaserve::v1::GenerateRequest* request,
                                                     exaserve::v1::CompleteResponse* response) {
  auto* reactor = context->DefaultReactor();
  auto text = Admit(context, *request);
  if (!text.ok()) {
    reactor->Finish(net::StatusToGrpc(text.status()));
    return reactor;
  }
  auto unary = std::make_shared<UnaryCompletion>(context, reactor, *request, response);
  if (frontend_.WouldWaitForReplica(text->model)) {
    HoldForReplica(unary, *std::move(text));
    return reactor;
  }
  unary->Start(frontend_, *std::move(text));
  return reactor;
}

// As the stream's hold above, for a unary Complete: it waits for a replica, then runs.
void InferenceService::HoldForReplica(const std::shared_ptr<UnaryCompletion>& unary,
                                      TextRequest text) {
  Activator& activator = frontend_.activator();
  const std::vector<std::pair<std::string, std::string>> retry = {
      {"retry-after", StrCat(activator.retry_after_s())}};
  const std::string model = text.model;
  absl::Status held = activator.Park(
      model, absl::Now(),
      {.resume = [this, unary, text = std::move(text)] { unary->Start(frontend_, text); },
       .refuse = [unary, retry](const absl::Status& s) { unary->Refuse(s, retry); },
       .gone = [unary] { return unary->FinishIfGone(); }});
  if (!held.ok()) unary->Refuse(held, retry);
}

UnaryCompletion::UnaryCompletion(grpc::CallbackServerContext* context,
                                 grpc::ServerUnaryReactor* reactor,
                                 const exaserve::v1::GenerateRequest& request,
                                 exaserve::v1::CompleteResponse* response)
    : context_(context),
      reactor_(reactor),
      response_(response),
      logprobs_(request.sampling().logprobs()),
      top_logprobs_(request.sampling().top_logprobs() > 0) {}

void UnaryCompletion::Start(Frontend& frontend, TextRequest text) {
  const std::string model = text.model;
  absl::Status refused;
  {
    // Held across Start so that the first event, on another thread, sees call_ set.
    absl::MutexLock lock(&mu_);
    if (finished_) return;  // the client left while it waited
    RateLimitReport report;
    auto call = frontend.Start(
        std::move(text),
        [self = shared_from_this()](const engine::StreamEvent& e) { self->OnEvent(e); }, &report);
    if (call.ok()) {
      call_ = *call;
      return;
    }
    AddRetryAfter(context_, report);
    refused = call.status();
  }
  // Outside mu_: the activator takes its lock before ours (FinishIfGone), and this takes its.
  Refuse(RefuseWhileActivating(frontend, context_, refused, model), {});
}

void UnaryCompletion::OnEvent(const engine::StreamEvent& e) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  if (e.token >= 0) response_->add_token_ids(e.token);
  if (e.token >= 0 && logprobs_) response_->add_logprobs(e.logprob);
  if (e.token >= 0 && top_logprobs_) {
    engine::rpc::TopLogprobsToProto(e.top_logprobs, response_->add_top_logprobs());
  }
  response_->mutable_text()->append(e.text);
  if (!e.finished) return;
  response_->set_finish_reason(engine::rpc::FinishReasonToProto(e.finish_reason));
  response_->mutable_usage()->set_prompt_tokens(e.prompt_tokens);
  response_->mutable_usage()->set_completion_tokens(e.completion_tokens);
  response_->mutable_usage()->set_time_to_first_token_ms(e.time_to_first_token_ms);
  if (std::shared_ptr<Call> call = call_.lock()) {
    response_->set_request_id(call->request_id());
    response_->set_replica_id(call->replica_id());
    response_->set_seed(call->seed());
  }
  FinishLocked(e.status);
}

void UnaryCompletion::Refuse(const absl::Status& status,
                             const std::vector<std::pair<std::string, std::string>>& trailers) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  for (const auto& [key, value] : trailers) context_->AddTrailingMetadata(key, value);
  FinishLocked(status);
}

bool UnaryCompletion::FinishIfGone() {
  absl::MutexLock lock(&mu_);
  if (finished_) return true;
  if (!context_->IsCancelled()) return false;
  FinishLocked(absl::CancelledError("the client left while the request waited for a replica"));
  return true;
}

void UnaryCompletion::FinishLocked(const absl::Status& status) {
  finished_ = true;
  reactor_->Finish(status.ok() ? grpc::Status::OK : net::StatusToGrpc(status));
}

}  // namespace exa::gateway
