// absl::Status <-> grpc::Status, in one place. Modules speak absl::Status inside and gRPC at the
// wire (docs/architecture.md#module-map); the code crosses unchanged in both directions, because
// the two enums share their numbering, so the code a module picks on purpose is the code the
// client sees. The message crosses unchanged too (StatusFromGrpc can name the peer first).
// Thread-safety: pure functions, safe from any thread.
#pragma once

#include <grpcpp/support/status.h>

#include <string_view>

#include "absl/status/status.h"

namespace exa::net {

// The same code and message as a gRPC status; OK stays OK.
grpc::Status StatusToGrpc(const absl::Status& status);

// The same code and message as an absl::Status; OK stays OK.
absl::Status StatusFromGrpc(const grpc::Status& status);

// As above, with the message prefixed by `who` and ": " (the peer or tier that answered), so an
// error read far from the call still says where it came from. OK stays OK, without a message.
absl::Status StatusFromGrpc(const grpc::Status& status, std::string_view who);

}  // namespace exa::net
