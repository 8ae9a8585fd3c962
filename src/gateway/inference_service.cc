#include "gateway/inference_service.h"

#include <deque>

#include "absl/synchronization/mutex.h"
#include "common/status.h"

namespace exa::gateway {
namespace {

using exaserve::v1::FinishReason;

// Unsent messages per stream before the client counts as stalled and the request is cancelled.
constexpr size_t kMaxQueuedMessages = 4096;

FinishReason ToProto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop:
      return exaserve::v1::FINISH_REASON_STOP;
    case engine::FinishReason::kLength:
      return exaserve::v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kCancelled:
      return exaserve::v1::FINISH_REASON_CANCELLED;
    case engine::FinishReason::kError:
      return exaserve::v1::FINISH_REASON_ERROR;
    default:
      return exaserve::v1::FINISH_REASON_UNSPECIFIED;
  }
}

// Streams engine events to one Generate call; writes are issued one at a time.
class GenerateReactor final : public grpc::ServerWriteReactor<exaserve::v1::GenerateResponse> {
 public:
  void Begin(Frontend& frontend, TextRequest request) {
    absl::MutexLock lock(&mu_);
    auto call =
        frontend.Start(std::move(request), [this](const engine::StreamEvent& e) { OnEvent(e); });
    if (!call.ok()) {
      done_ = true;
      Finish(ToGrpc(call.status()));
      return;
    }
    call_ = *call;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      if (call_) call_->Cancel();
      return;
    }
    WriteNextLocked();
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (call_) call_->Cancel();
  }
  void OnDone() override {
    // gRPC is done with the reactor, but the engine may still hold the callback: the final
    // event frees it (released_ tells it so).
    bool free_now;
    {
      absl::MutexLock lock(&mu_);
      released_ = true;
      free_now = engine_done_ || call_ == nullptr;
    }
    if (free_now) delete this;
  }

 private:
  void OnEvent(const engine::StreamEvent& e) {
    bool free_now = false;
    {
      absl::MutexLock lock(&mu_);
      if (!done_) {
        if (queue_.size() >= kMaxQueuedMessages) {
          call_->Cancel();
        } else if (e.token >= 0 || !e.text.empty() || e.finished) {
          exaserve::v1::GenerateResponse r;
          if (e.token >= 0) r.add_token_ids(e.token);
          r.set_text(e.text);
          if (e.token >= 0 && call_ && first_) {
            r.set_request_id(call_->request_id());
            r.set_replica_id(call_->replica_id());
            first_ = false;
          }
          if (e.finished) {
            r.set_finish_reason(ToProto(e.finish_reason));
            r.mutable_usage()->set_prompt_tokens(e.prompt_tokens);
            r.mutable_usage()->set_completion_tokens(e.completion_tokens);
            final_status_ = e.status.ok() || e.finish_reason == engine::FinishReason::kCancelled
                                ? grpc::Status::OK
                                : ToGrpc(e.status);
            if (!e.status.ok() && e.finish_reason == engine::FinishReason::kCancelled) {
              final_status_ = grpc::Status(grpc::CANCELLED, "request cancelled");
            }
            finishing_ = true;
          }
          queue_.push_back(std::move(r));
          WriteNextLocked();
        }
      }
      if (e.finished) {
        engine_done_ = true;
        free_now = released_;
      }
    }
    if (free_now) delete this;
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || done_) return;
    if (queue_.empty()) {
      if (finishing_) {
        done_ = true;
        Finish(final_status_);
      }
      return;
    }
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }

  absl::Mutex mu_;
  std::shared_ptr<Call> call_ ABSL_GUARDED_BY(mu_);
  std::deque<exaserve::v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  exaserve::v1::GenerateResponse current_;
  grpc::Status final_status_;
  bool writing_ = false, finishing_ = false, done_ = false, first_ = true;
  bool engine_done_ = false, released_ = false;
};

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

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
  const auto& s = p.sampling();
  r.sampling.temperature = s.temperature();
  r.sampling.top_p = s.top_p() == 0 ? 1.0f : s.top_p();
  r.sampling.top_k = s.top_k();
  r.sampling.repetition_penalty = s.repetition_penalty() == 0 ? 1.0f : s.repetition_penalty();
  if (s.has_seed()) r.sampling.seed = s.seed();
  r.sampling.logprobs = s.logprobs();
  r.stop.assign(p.stop().begin(), p.stop().end());
  r.request_id = p.request_id();
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
  EXA_RETURN_IF_ERROR(frontend_.Authorize(AuthorizationMetadata(context)));
  return FromProto(request);
}

grpc::ServerWriteReactor<exaserve::v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const exaserve::v1::GenerateRequest* request) {
  auto* reactor = new GenerateReactor();
  auto text = Admit(context, *request);
  if (!text.ok()) {
    reactor->Finish(ToGrpc(text.status()));
    return reactor;
  }
  reactor->Begin(frontend_, *std::move(text));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Complete(grpc::CallbackServerContext* context,
                                                     const exaserve::v1::GenerateRequest* request,
                                                     exaserve::v1::CompleteResponse* response) {
  auto* reactor = context->DefaultReactor();
  auto text = Admit(context, *request);
  if (!text.ok()) {
    reactor->Finish(ToGrpc(text.status()));
    return reactor;
  }
  struct State {
    absl::Mutex mu;
    std::shared_ptr<Call> call;
  };
  auto state = std::make_shared<State>();
  absl::MutexLock lock(&state->mu);
  auto call =
      frontend_.Start(*std::move(text), [reactor, response, state](const engine::StreamEvent& e) {
        absl::MutexLock lock(&state->mu);
        if (e.token >= 0) response->add_token_ids(e.token);
        response->mutable_text()->append(e.text);
        if (!e.finished) return;
        response->set_finish_reason(ToProto(e.finish_reason));
        response->mutable_usage()->set_prompt_tokens(e.prompt_tokens);
        response->mutable_usage()->set_completion_tokens(e.completion_tokens);
        if (state->call) {
          response->set_request_id(state->call->request_id());
          response->set_replica_id(state->call->replica_id());
        }
        reactor->Finish(e.status.ok() ? grpc::Status::OK : ToGrpc(e.status));
      });
  if (!call.ok()) {
    reactor->Finish(ToGrpc(call.status()));
    return reactor;
  }
  state->call = *call;
  return reactor;
}

}  // namespace exa::gateway
