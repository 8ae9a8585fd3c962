// absl::Status <-> grpc::Status (grpc_status.h): pure functions, safe from any thread.
#include "net/grpc_status.h"

#include <string>

#include "common/strings.h"

namespace exa::net {

grpc::Status StatusToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status StatusFromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::Status StatusFromGrpc(const grpc::Status& status, std::string_view who) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      StrCat(who, ": ", status.error_message()));
}

}  // namespace exa::net
