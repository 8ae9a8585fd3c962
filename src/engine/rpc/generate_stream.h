// A gRPC server stream of GenerateResponse fed by engine StreamEvents: the shape shared by the
// gateway's public Inference.Generate and the node agent's Node.Generate (the gateway → replica
// hop). Writes go out one at a time; events that arrive meanwhile queue, up to a bound past
// which the client counts as stalled and the work is cancelled (no unbounded buffering).
//
// Lifetime: the reactor deletes itself once gRPC is done with it (OnDone) AND the producer has
// delivered its final event, whichever comes last, so a late engine callback never touches freed
// memory.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/request.h"
#include "exaserve/v1/inference.pb.h"

namespace exa::engine::rpc {

exaserve::v1::FinishReason FinishReasonToProto(engine::FinishReason reason);
engine::FinishReason FinishReasonFromProto(exaserve::v1::FinishReason reason);
// The proto's sampling parameters, with its zero defaults (top_p, repetition_penalty) made 1.
engine::SamplingParams SamplingFromProto(const exaserve::v1::SamplingParams& proto);
void SamplingToProto(const engine::SamplingParams& params, exaserve::v1::SamplingParams* proto);
// An event's most likely tokens (SamplingParams.top_logprobs) on the wire and back.
void TopLogprobsToProto(const std::vector<std::pair<int32_t, float>>& top,
                        exaserve::v1::TopLogprobs* proto);
std::vector<std::pair<int32_t, float>> TopLogprobsFromProto(const exaserve::v1::TopLogprobs& proto);

// What the producer hands back once started: how to cancel it and, for the first message, which
// request and replica serve it (the replica can change on a retry before the first token).
struct StreamHandle {
  std::function<void()> cancel;
  std::function<std::string()> request_id;
  std::function<std::string()> replica_id;
  // The sampling seed the request runs with, for the first message; unset: none is sent.
  std::function<uint64_t()> seed;
};

class GenerateStreamReactor final
    : public grpc::ServerWriteReactor<exaserve::v1::GenerateResponse> {
 public:
  // Unsent messages before the client counts as stalled and the request is cancelled.
  static constexpr size_t kMaxQueuedMessages = 4096;

  using Starter = std::function<absl::StatusOr<StreamHandle>(engine::StreamCallback sink)>;

  // `logprobs`: the request asked for them (SamplingParams.logprobs); each message then carries
  // one per token id, and with `top_logprobs` > 0 the alternatives at each token's position.
  explicit GenerateStreamReactor(bool logprobs = false, int32_t top_logprobs = 0)
      : logprobs_(logprobs), top_logprobs_(top_logprobs > 0) {}

  // Runs `start` with this stream's sink; an error finishes the RPC with its status.
  void Begin(const Starter& start);

  // A stream held before it starts (a gateway waiting for a model's first replica): until one
  // of Resume, Refuse or AbandonIfGone settles it, the holder counts as the producer, so the
  // reactor outlives OnDone. `context` is this RPC's, for trailing metadata on a refusal.
  void Hold(grpc::CallbackServerContext* context);
  // Starts the held stream now, as Begin; if the client left meanwhile, only settles it.
  void Resume(const Starter& start);
  // Finishes the held stream with `status` and the `trailers` as trailing metadata.
  void Refuse(const absl::Status& status,
              const std::vector<std::pair<std::string, std::string>>& trailers);
  // True when the client left while held; the stream is then settled (the holder drops it and
  // must not touch it again).
  bool AbandonIfGone();

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void OnEvent(const engine::StreamEvent& e);
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishCancelledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartLocked(const Starter& start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The holder is done with a held stream; true when the reactor is to be freed now.
  bool SettleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  StreamHandle handle_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;  // Hold()ed and not yet settled
  grpc::CallbackServerContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // while held
  std::deque<exaserve::v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  exaserve::v1::GenerateResponse current_ ABSL_GUARDED_BY(mu_);  // the write in flight
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  const bool logprobs_;
  const bool top_logprobs_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool first_ ABSL_GUARDED_BY(mu_) = true;
  bool producer_done_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace exa::engine::rpc
