#include "engine/rpc/generate_stream.h"

#include <algorithm>

#include "net/grpc_status.h"

namespace exa::engine::rpc {

using net::StatusToGrpc;

using exaserve::v1::FinishReason;

FinishReason FinishReasonToProto(engine::FinishReason r) {
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

engine::FinishReason FinishReasonFromProto(FinishReason r) {
  switch (r) {
    case exaserve::v1::FINISH_REASON_STOP:
      return engine::FinishReason::kStop;
    case exaserve::v1::FINISH_REASON_LENGTH:
      return engine::FinishReason::kLength;
    case exaserve::v1::FINISH_REASON_CANCELLED:
      return engine::FinishReason::kCancelled;
    case exaserve::v1::FINISH_REASON_ERROR:
      return engine::FinishReason::kError;
    default:
      return engine::FinishReason::kNone;
  }
}

engine::SamplingParams SamplingFromProto(const exaserve::v1::SamplingParams& s) {
  engine::SamplingParams out;
  out.temperature = s.temperature();
  out.top_p = s.top_p() == 0 ? 1.0f : s.top_p();
  out.top_k = s.top_k();
  out.min_p = s.min_p();
  out.repetition_penalty = s.repetition_penalty() == 0 ? 1.0f : s.repetition_penalty();
  if (s.has_seed()) out.seed = s.seed();
  out.logprobs = s.logprobs();
  out.top_logprobs = s.top_logprobs();
  out.presence_penalty = s.presence_penalty();
  out.frequency_penalty = s.frequency_penalty();
  out.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  // A map's order is the wire's; the sum per token does not depend on it, but logs and tests
  // read the entries in id order.
  std::sort(out.logit_bias.begin(), out.logit_bias.end());
  return out;
}

void SamplingToProto(const engine::SamplingParams& p, exaserve::v1::SamplingParams* s) {
  s->set_temperature(p.temperature);
  s->set_top_p(p.top_p);
  s->set_top_k(p.top_k);
  s->set_min_p(p.min_p);
  s->set_repetition_penalty(p.repetition_penalty);
  if (p.seed) s->set_seed(*p.seed);
  s->set_logprobs(p.logprobs);
  s->set_top_logprobs(p.top_logprobs);
  s->set_presence_penalty(p.presence_penalty);
  s->set_frequency_penalty(p.frequency_penalty);
  for (const auto& [id, bias] : p.logit_bias) (*s->mutable_logit_bias())[id] = bias;
}

void TopLogprobsToProto(const std::vector<std::pair<int32_t, float>>& top,
                        exaserve::v1::TopLogprobs* proto) {
  for (const auto& [token, logprob] : top) {
    proto->add_token_ids(token);
    proto->add_logprobs(logprob);
  }
}

std::vector<std::pair<int32_t, float>> TopLogprobsFromProto(
    const exaserve::v1::TopLogprobs& proto) {
  std::vector<std::pair<int32_t, float>> out;
  const int n = std::min(proto.token_ids_size(), proto.logprobs_size());
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.emplace_back(proto.token_ids(i), proto.logprobs(i));
  return out;
}

void GenerateStreamReactor::Begin(const Starter& start) {
  absl::MutexLock lock(&mu_);
  StartLocked(start);
}

void GenerateStreamReactor::Hold(grpc::CallbackServerContext* context) {
  absl::MutexLock lock(&mu_);
  held_ = true;
  context_ = context;
}

bool GenerateStreamReactor::SettleLocked() {
  held_ = false;
  context_ = nullptr;
  producer_done_ = true;
  return released_;
}

void GenerateStreamReactor::Resume(const Starter& start) {
  bool free_now = false;
  {
    absl::MutexLock lock(&mu_);
    if (done_) {
      free_now = SettleLocked();  // cancelled while held: nothing to start
    } else {
      // Not finished, so gRPC has not called OnDone: the context is still valid.
      held_ = false;
      context_ = nullptr;
      StartLocked(start);
    }
  }
  if (free_now) delete this;
}

void GenerateStreamReactor::Refuse(
    const absl::Status& status, const std::vector<std::pair<std::string, std::string>>& trailers) {
  bool free_now = false;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) {
      for (const auto& [key, value] : trailers) context_->AddTrailingMetadata(key, value);
      done_ = true;
      Finish(StatusToGrpc(status));
    }
    free_now = SettleLocked();
  }
  if (free_now) delete this;
}

bool GenerateStreamReactor::AbandonIfGone() {
  bool free_now = false;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) return false;
    free_now = SettleLocked();
  }
  if (free_now) delete this;
  return true;
}

void GenerateStreamReactor::StartLocked(const Starter& start) {
  auto handle = start([this](const engine::StreamEvent& e) { OnEvent(e); });
  if (!handle.ok()) {
    done_ = true;
    producer_done_ = true;
    Finish(StatusToGrpc(handle.status()));
    return;
  }
  handle_ = *std::move(handle);
  started_ = true;
}

void GenerateStreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) {
    // The client is gone (cancelled, deadline, disconnect): no later write can succeed.
    CancelLocked();
    FinishCancelledLocked();
    return;
  }
  WriteNextLocked();
}

void GenerateStreamReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  CancelLocked();
  // With a write in flight, its OnWriteDone(false) finishes the RPC; Finish is not called
  // while a write is outstanding.
  if (!writing_) FinishCancelledLocked();
}

void GenerateStreamReactor::CancelLocked() {
  if (started_ && handle_.cancel) handle_.cancel();
}

void GenerateStreamReactor::FinishCancelledLocked() {
  // Every RPC must be finished, a cancelled one too, or gRPC never calls OnDone: the reactor
  // would leak and server shutdown would wait for it for ever. Queued messages are dropped.
  if (done_) return;
  done_ = true;
  queue_.clear();
  Finish(grpc::Status(grpc::CANCELLED, "request cancelled"));
}

void GenerateStreamReactor::OnDone() {
  // gRPC is done with the reactor, but the producer may still hold the sink: its final event
  // frees the reactor (released_ tells it so).
  bool free_now;
  {
    absl::MutexLock lock(&mu_);
    released_ = true;
    free_now = producer_done_ || (!started_ && !held_);
  }
  if (free_now) delete this;
}

void GenerateStreamReactor::OnEvent(const engine::StreamEvent& e) {
  bool free_now = false;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) {
      if (queue_.size() >= kMaxQueuedMessages) {
        CancelLocked();
      } else if (e.token >= 0 || !e.text.empty() || e.finished) {
        exaserve::v1::GenerateResponse r;
        if (e.token >= 0) r.add_token_ids(e.token);
        if (e.token >= 0 && logprobs_) r.add_logprobs(e.logprob);
        if (e.token >= 0 && top_logprobs_) TopLogprobsToProto(e.top_logprobs, r.add_top_logprobs());
        r.set_text(e.text);
        if (e.token >= 0 && started_ && first_) {
          if (handle_.request_id) r.set_request_id(handle_.request_id());
          if (handle_.replica_id) r.set_replica_id(handle_.replica_id());
          if (handle_.seed) r.set_seed(handle_.seed());
          first_ = false;
        }
        if (e.finished) {
          r.set_finish_reason(FinishReasonToProto(e.finish_reason));
          r.mutable_usage()->set_prompt_tokens(e.prompt_tokens);
          r.mutable_usage()->set_completion_tokens(e.completion_tokens);
          r.mutable_usage()->set_time_to_first_token_ms(e.time_to_first_token_ms);
          if (e.status.ok()) {
            final_status_ = grpc::Status::OK;
          } else if (e.finish_reason == engine::FinishReason::kCancelled &&
                     e.status.code() == absl::StatusCode::kCancelled) {
            final_status_ = grpc::Status(grpc::CANCELLED, "request cancelled");
          } else {
            final_status_ = StatusToGrpc(e.status);
          }
          finishing_ = true;
        }
        queue_.push_back(std::move(r));
        WriteNextLocked();
      }
    }
    if (e.finished) {
      producer_done_ = true;
      free_now = released_;
    }
  }
  if (free_now) delete this;
}

void GenerateStreamReactor::WriteNextLocked() {
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

}  // namespace exa::engine::rpc
