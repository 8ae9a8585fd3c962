// exaserve.v1.Inference over gRPC: Generate (server stream) and Complete (unary), adapters over
// the Frontend. Errors map to gRPC codes: INVALID_ARGUMENT names the field, NOT_FOUND the model,
// RESOURCE_EXHAUSTED on overload, UNAVAILABLE when no replica is ready. A call for a model scaled
// to zero waits at the activator while a replica starts (gateway/activator.h). A client that
// cancels a stream frees the replica's KV blocks.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/rpc/generate_stream.h"
#include "exaserve/v1/inference.grpc.pb.h"
#include "gateway/frontend.h"

namespace exa::gateway {

// One unary Complete: the response is filled from the call's events, and the RPC finished once,
// by whichever comes first of the call's end, a refusal, or (while it is held) the client's
// leaving. Shared by the call's sink and the activator's entry; the gRPC reactor is the server's
// default one, valid until Finish.
class UnaryCompletion : public std::enable_shared_from_this<UnaryCompletion> {
 public:
  UnaryCompletion(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                  const exaserve::v1::GenerateRequest& request,
                  exaserve::v1::CompleteResponse* response);

  // Starts the call on `frontend`; a refusal finishes the RPC. Nothing once finished.
  void Start(Frontend& frontend, TextRequest text);
  // Finishes with `status` and `trailers`, unless finished already.
  void Refuse(const absl::Status& status,
              const std::vector<std::pair<std::string, std::string>>& trailers);
  // Whether the RPC is over: finished, or finished now as CANCELLED because the client left.
  bool FinishIfGone();

 private:
  void OnEvent(const engine::StreamEvent& e);
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  exaserve::v1::CompleteResponse* const response_;
  const bool logprobs_;
  const bool top_logprobs_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Weak: the call holds its sink, and the sink holds this.
  std::weak_ptr<Call> call_ ABSL_GUARDED_BY(mu_);
};

class InferenceService final : public exaserve::v1::Inference::CallbackService {
 public:
  explicit InferenceService(Frontend& frontend) : frontend_(frontend) {}

  grpc::ServerWriteReactor<exaserve::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const exaserve::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* context,
                                     const exaserve::v1::GenerateRequest* request,
                                     exaserve::v1::CompleteResponse* response) override;

 private:
  // Authorizes the caller and converts the request: what both RPCs do first.
  absl::StatusOr<TextRequest> Admit(grpc::CallbackServerContext* context,
                                    const exaserve::v1::GenerateRequest& request) const;
  void HoldForReplica(engine::rpc::GenerateStreamReactor* reactor,
                      grpc::CallbackServerContext* context, TextRequest text);
  void HoldForReplica(const std::shared_ptr<UnaryCompletion>& unary, TextRequest text);

  Frontend& frontend_;
};

// The caller's `authorization` metadata ("Bearer <key>"), or "" when absent.
std::string_view AuthorizationMetadata(const grpc::CallbackServerContext* context);

// Converts the proto request; INVALID_ARGUMENT names a bad field.
absl::StatusOr<TextRequest> FromProto(const exaserve::v1::GenerateRequest& request);

}  // namespace exa::gateway
