// Every status code and its message cross between absl::Status and grpc::Status unchanged in both
// directions, so the code a module picks is the code the client sees; `who` prefixes a message.
#include "net/grpc_status.h"

#include <catch2/catch.hpp>

namespace exa::net {
namespace {

TEST_CASE("every code and its message survive absl -> gRPC -> absl") {
  for (int code = 0; code <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++code) {
    const absl::Status original(static_cast<absl::StatusCode>(code), "spec.replicas: expected 1+");
    const grpc::Status wire = StatusToGrpc(original);
    CHECK(static_cast<int>(wire.error_code()) == code);
    CHECK(wire.error_message() == (code == 0 ? "" : "spec.replicas: expected 1+"));
    CHECK(StatusFromGrpc(wire) == original);
  }
}

TEST_CASE("named codes map to their gRPC namesakes") {
  CHECK(StatusToGrpc(absl::OkStatus()).ok());
  CHECK(StatusToGrpc(absl::InvalidArgumentError("x")).error_code() == grpc::INVALID_ARGUMENT);
  CHECK(StatusToGrpc(absl::ResourceExhaustedError("x")).error_code() == grpc::RESOURCE_EXHAUSTED);
  CHECK(StatusToGrpc(absl::UnavailableError("x")).error_code() == grpc::UNAVAILABLE);
  CHECK(StatusToGrpc(absl::FailedPreconditionError("x")).error_code() == grpc::FAILED_PRECONDITION);
  CHECK(StatusFromGrpc(grpc::Status(grpc::NOT_FOUND, "no model m")) ==
        absl::NotFoundError("no model m"));
}

TEST_CASE("StatusFromGrpc with `who` names the peer first, and leaves OK alone") {
  CHECK(StatusFromGrpc(grpc::Status(grpc::UNAVAILABLE, "connection refused"), "origin") ==
        absl::UnavailableError("origin: connection refused"));
  CHECK(StatusFromGrpc(grpc::Status::OK, "origin").ok());
}

}  // namespace
}  // namespace exa::net
