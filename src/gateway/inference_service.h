// exaserve.v1.Inference over gRPC: Generate (server stream) and Complete (unary), adapters over
// the Frontend. Errors map to gRPC codes: INVALID_ARGUMENT names the field, NOT_FOUND the model,
// RESOURCE_EXHAUSTED on overload, UNAVAILABLE when no replica is ready. A Generate stream for a
// model scaled to zero waits at the activator while a replica starts (gateway/activator.h). A
// client that cancels frees the replica's KV blocks.
#pragma once

#include <string_view>

#include "engine/rpc/generate_stream.h"
#include "exaserve/v1/inference.grpc.pb.h"
#include "gateway/frontend.h"

namespace exa::gateway {

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

  Frontend& frontend_;
};

// The caller's `authorization` metadata ("Bearer <key>"), or "" when absent.
std::string_view AuthorizationMetadata(const grpc::CallbackServerContext* context);

// Converts the proto request; INVALID_ARGUMENT names a bad field.
absl::StatusOr<TextRequest> FromProto(const exaserve::v1::GenerateRequest& request);

}  // namespace exa::gateway
