// The stream half of the Frontend (docs/architecture.md#failover): every event of every attempt
// passes OnEvent, which keeps what the client received; a replica that fails or stalls is
// replaced by a retry (before the first token) or a continuation (after it), and the client sees
// one stream.
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/strings.h"
#include "gateway/frontend.h"

namespace exa::gateway {
namespace {

// Attempts of a request that fails before its first token: the first and one retry.
constexpr size_t kMaxRetryAttempts = 2;
// Retries and resumes in progress stay under 20 % of the requests in flight, or this many when
// that is fewer: a failing cluster is not hit twice as hard, and one node's death among a few
// can still hand all its streams over.
constexpr int kMinReattemptBudget = 16;
// Without gateway.stream_stall_timeout: this many times the replica's inter-token P99, and at
// least kMinStall.
constexpr double kStallItlFactor = 10;
constexpr double kStallTtftFactor = 4;
constexpr absl::Duration kMinStall = absl::Seconds(2);

void CancelAll(ReplicaBackend& backend,
               const std::vector<std::pair<std::string, engine::RequestId>>& attempts) {
  for (const auto& [replica, id] : attempts) backend.Cancel(replica, id);
}

}  // namespace

void Frontend::OnEvent(const std::shared_ptr<Call>& call, int attempt,
                       const engine::StreamEvent& e) {
  std::vector<std::pair<std::string, engine::RequestId>> cancel;
  {
    absl::MutexLock lock(&call->stream_mu_);
    if (attempt != call->attempt_ || call->done_) return;  // an abandoned attempt
    const absl::Time now = absl::Now();
    if (!e.finished) {
      if (e.token >= 0) {
        if (call->first_token_at_ == absl::InfinitePast()) {
          call->first_token_at_ = now;
          const double ttft = absl::ToDoubleSeconds(now - call->admitted_);
          ttft_seconds_.Observe(ttft);
          // The router's estimate was for the first replica alone.
          if (attempt == 0) ObserveWait(call->model_, call->tokens_ahead_, ttft);
        }
        if (call->reattempting_ && !call->sent_tokens_.empty()) {
          resume_gap_seconds_.Observe(absl::ToDoubleSeconds(now - call->broken_at_));
        }
        EndReattempt(*call);
        call->sent_tokens_.push_back(e.token);
      }
      call->sent_text_bytes_ += e.text.size();
      call->last_event_at_ = now;
      call->sink_(e);
      return;
    }
    Reattempt next = Reattempt::kRefused;
    call->refusal_.clear();
    if (!e.status.ok() && !call->cancel_requested_ && IsRetryable(e.status)) {
      call->break_status_ = e.status;
      next = Replace(call, "stream_error", /*abandon=*/false, now);
    }
    if (next == Reattempt::kRefused) {
      if (!call->refusal_.empty()) CountRefusal(*call);
      FinishCall(*call, e);
    }
    cancel.swap(call->to_cancel_);
  }
  CancelAll(backend_, cancel);
}

Frontend::Reattempt Frontend::Replace(const std::shared_ptr<Call>& call, std::string_view cause,
                                      bool abandon, absl::Time now) {
  const bool resume = !call->sent_tokens_.empty();
  const bool first_try = !call->resume_by_.has_value();  // not a resume waiting already
  call->refusal_.clear();
  if (first_try && (resume ? call->resumes_ >= options_.max_resumes
                           : call->tried_.size() >= kMaxRetryAttempts)) {
    call->refusal_ = "attempts";
    return Reattempt::kRefused;
  }
  // A request whose replica failed or stalled waits (paused, retried by CheckStreams) until
  // gateway.resume_deadline while the budget is spent, and mid-stream also while no replica is
  // ready (before its first token that is the client's error at once, as for a new request); one
  // whose replica merely looks bad (suspected, ejected) keeps it.
  const bool broken = !abandon || cause == "stalled";
  const std::string failed = call->replica_id();
  std::string blocked;
  absl::StatusOr<Sent> next = absl::UnavailableError("not sent");
  if (!call->reattempting_) {
    const int budget = std::max(kMinReattemptBudget, in_flight_.load() / 5);
    if (reattempts_in_flight_.fetch_add(1) < budget) {
      call->reattempting_ = true;
    } else {
      reattempts_in_flight_--;
      blocked = "budget";
    }
  }
  if (blocked.empty()) {
    next = SubmitNext(call, first_try ? call->attempt_ + 1 : call->attempt_);
    if (!next.ok()) blocked = "no_replica";
  }
  if (!blocked.empty()) {
    if (broken && (resume || blocked == "budget")) {
      if (first_try) CommitBreak(*call, cause, abandon);
      if (!call->resume_by_) call->resume_by_ = now + options_.resume_deadline;
      if (now < *call->resume_by_) return Reattempt::kWaiting;
    }
    call->refusal_ = blocked;
    return Reattempt::kRefused;
  }
  if (first_try) CommitBreak(*call, cause, abandon);
  {
    absl::MutexLock lock(&call->mu_);
    call->replica_id_ = next->replica;
  }
  call->tried_.push_back(next->replica);
  call->dispatched_ = true;
  call->dispatch_ = next->dispatch;
  call->engine_id_ = static_cast<int64_t>(next->id);
  call->last_event_at_ = now;
  call->resume_by_.reset();
  if (call->cancel_requested_) call->to_cancel_.emplace_back(next->replica, next->id);
  (resume ? resumes_.WithLabels({call->resume_cause_}) : retries_.WithLabels({"sent"})).Increment();
  EXA_LOG_INFO("gateway",
               resume ? "request resumed on another replica" : "request retried on another replica",
               {{"request_id", call->request_id()},
                {"attempt", call->attempt_},
                {"cause", std::string(cause)},
                {"failed", failed},
                {"replica", next->replica},
                {"tokens_sent", call->sent_tokens_.size()}});
  return Reattempt::kSent;
}

void Frontend::CommitBreak(Call& call, std::string_view cause, bool abandon) {
  // From here on the old attempt's events are ignored, and it no longer counts as dispatched.
  call.attempt_++;
  const std::string old_replica = call.replica_id();
  if (abandon && call.engine_id_.load() >= 0) {
    call.to_cancel_.emplace_back(old_replica,
                                 static_cast<engine::RequestId>(call.engine_id_.load()));
  }
  if (call.dispatched_) table_.Complete(old_replica, call.dispatch_);
  call.dispatched_ = false;
  call.resume_cause_ = std::string(cause);
  if (!call.sent_tokens_.empty()) {
    call.resumes_++;
    call.broken_at_ = call.last_event_at_;
  }
}

void Frontend::CountRefusal(const Call& call) {
  if (call.sent_tokens_.empty()) {
    retries_.WithLabels({"refused_" + call.refusal_}).Increment();
  } else {
    resume_failures_.WithLabels({call.refusal_}).Increment();
  }
}

absl::StatusOr<Frontend::Sent> Frontend::SubmitNext(const std::shared_ptr<Call>& call,
                                                    int attempt) {
  engine::GenerateRequest g = call->request_;
  // A continuation: what the client already has is part of the prompt, and the engine counts it
  // as generated (engine/request.h).
  g.prompt_tokens.insert(g.prompt_tokens.end(), call->sent_tokens_.begin(),
                         call->sent_tokens_.end());
  g.resumed_tokens = static_cast<int32_t>(call->sent_tokens_.size());
  g.resumed_text_bytes = call->sent_text_bytes_;
  g.attempt = attempt;
  auto replica = Route({call->model_, call->version_, static_cast<int64_t>(g.prompt_tokens.size()),
                        call->tried_, call->labels_},
                       g);
  if (!replica.ok()) return replica.status();
  const auto prefill = static_cast<int64_t>(g.prompt_tokens.size());
  g.callback = AttemptCallback(call, attempt);
  auto id = backend_.Submit(replica->replica, std::move(g));
  if (!id.ok()) {
    table_.Complete(replica->replica, replica->dispatch);
    return id.status();
  }
  if (!call->sent_tokens_.empty()) resume_prefill_tokens_.Increment(prefill);
  return Sent{replica->replica, *id, replica->dispatch};
}

void Frontend::EndReattempt(Call& call) {
  if (!call.reattempting_) return;
  call.reattempting_ = false;
  reattempts_in_flight_--;
}

std::string Frontend::BrokenCause(Call& call, absl::Time now) const {
  if (call.done_ || call.resume_by_ || call.cancel_requested_) return "";
  const router::ReplicaStanding standing = table_.StandingOf(call.replica_id());
  // A replica gone from the table (its node left, or it was stopped and drains) keeps its
  // streams: they end by themselves or break, and the stall timeout covers a silent death.
  if (call.kept_attempt_ != call.attempt_) {
    if (standing.known && !standing.healthy) return "node_suspect";
    if (standing.known && standing.ejected) return "ejected";
  }
  // Before the first token a request may queue for as long as the replica is busy.
  if (call.sent_tokens_.empty()) return "";
  absl::Duration stall =
      options_.stream_stall_timeout > absl::ZeroDuration()
          ? options_.stream_stall_timeout
          : std::max(kMinStall, absl::Milliseconds(kStallItlFactor * standing.itl_p99_ms));
  // A continuation's first token comes after a prefill of everything so far, which a busy
  // replica may queue: it gets what the replica's first tokens take too.
  if (call.reattempting_) {
    stall = std::max(stall, absl::Milliseconds(kStallTtftFactor * standing.ttft_p99_ms));
  }
  return now - call.last_event_at_ > stall ? "stalled" : "";
}

void Frontend::CheckStreams(absl::Time now) {
  std::vector<std::shared_ptr<Call>> calls;
  {
    absl::MutexLock lock(&calls_mu_);
    calls.reserve(open_calls_.size());
    for (const auto& [key, call] : open_calls_) calls.push_back(call);
  }
  for (const std::shared_ptr<Call>& call : calls) {
    std::vector<std::pair<std::string, engine::RequestId>> cancel;
    {
      absl::MutexLock lock(&call->stream_mu_);
      if (call->done_) continue;
      Reattempt next = Reattempt::kSent;
      if (call->resume_by_ && call->cancel_requested_) {  // its client left while it waited
        engine::StreamEvent e;
        e.finished = true;
        e.finish_reason = engine::FinishReason::kCancelled;
        e.status = absl::CancelledError("request cancelled");
        FinishCall(*call, std::move(e));
      } else if (call->resume_by_) {
        next = Replace(call, call->resume_cause_, /*abandon=*/false, now);
      } else if (std::string cause = BrokenCause(*call, now); !cause.empty()) {
        const std::string replica = call->replica_id();
        next = Replace(call, cause, /*abandon=*/true, now);
        if (next == Reattempt::kRefused && cause != "stalled") {
          // Suspected or ejected but not failed: it keeps the stream it could not hand over.
          call->kept_attempt_ = call->attempt_;
          EndReattempt(*call);
          next = Reattempt::kSent;
        } else if (next != Reattempt::kSent) {
          call->break_status_ = absl::UnavailableError(
              StrCat("replica ", replica, " stopped streaming (", cause, ")"));
        }
      }
      if (next == Reattempt::kRefused) {
        CountRefusal(*call);
        if (call->dispatched_ && call->engine_id_.load() >= 0) {  // a stalled attempt still runs
          call->to_cancel_.emplace_back(call->replica_id(),
                                        static_cast<engine::RequestId>(call->engine_id_.load()));
        }
        engine::StreamEvent e;
        e.finished = true;
        e.finish_reason = engine::FinishReason::kError;
        e.status = call->break_status_;
        FinishCall(*call, std::move(e));
      }
      cancel.swap(call->to_cancel_);
    }
    CancelAll(backend_, cancel);
  }
}

void Frontend::FinishCall(Call& call, engine::StreamEvent e) {
  call.done_ = true;
  call.finished_ = true;
  EndReattempt(call);
  const absl::Time now = absl::Now();
  const absl::Duration e2e = now - call.admitted_;
  // Usage as the client saw it: its prompt, and each token it received once, whichever
  // replicas produced them (the prefill a resume repeated is a metric of its own).
  e.prompt_tokens = call.prompt_tokens_;
  e.completion_tokens = static_cast<int32_t>(call.sent_tokens_.size());
  if (call.first_token_at_ != absl::InfinitePast()) {
    e.time_to_first_token_ms = absl::ToDoubleMilliseconds(call.first_token_at_ - call.admitted_);
  }
  e2e_seconds_.Observe(absl::ToDoubleSeconds(e2e));
  LogFinished(call, e, e2e);
  prompt_tokens_total_.Increment(e.prompt_tokens);
  completion_tokens_total_.Increment(e.completion_tokens);
  if (rate_limiter_) {  // the client pays for the tokens it got, not for unused max_tokens
    rate_limiter_->Refund(call.rate_charge_,
                          call.rate_charge_.tokens - e.prompt_tokens - e.completion_tokens,
                          /*request=*/false, RateLimiter::Now());
  }
  // A request its client cancelled (or disconnected from) is not an engine failure.
  requests_
      .WithLabels({e.status.ok()            ? "ok"
                   : call.cancel_requested_ ? "cancelled"
                                            : "engine_error"})
      .Increment();
  if (call.dispatched_) table_.Complete(call.replica_id(), call.dispatch_);
  call.dispatched_ = false;
  in_flight_--;
  {
    absl::MutexLock lock(&calls_mu_);
    open_calls_.erase(&call);
  }
  call.sink_(e);
}

}  // namespace exa::gateway
