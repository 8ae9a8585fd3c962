// exaserve-cli's shared error lines and call context (cli_common.h): no state, safe from any
// thread.
#include "tools/cli_common.h"

#include <chrono>
#include <cstdio>

namespace exa::tools {

namespace {

// "exaserve-cli[ <command>]: <message>" on stderr, in one write.
void PrintError(std::string_view message, std::string_view command) {
  std::fprintf(stderr, "exaserve-cli%s%.*s: %.*s\n", command.empty() ? "" : " ",
               static_cast<int>(command.size()), command.data(), static_cast<int>(message.size()),
               message.data());
}

}  // namespace

int Usage(std::string_view message, std::string_view command) {
  PrintError(message, command);
  return kUsageExitCode;
}

int Failure(std::string_view message, std::string_view command) {
  PrintError(message, command);
  return kFailureExitCode;
}

int RpcFailure(std::string_view addr, const grpc::Status& status) {
  return RpcFailure(addr, status, status.error_message());
}

int RpcFailure(std::string_view addr, const grpc::Status& status, std::string_view message) {
  std::fprintf(stderr, "exaserve-cli: %.*s: %.*s (%d)\n", static_cast<int>(addr.size()),
               addr.data(), static_cast<int>(message.size()), message.data(),
               static_cast<int>(status.error_code()));
  return kFailureExitCode;
}

std::unique_ptr<grpc::ClientContext> MakeContext(const ClusterAccess& cluster) {
  return MakeContext(cluster, cluster.timeout);
}

std::unique_ptr<grpc::ClientContext> MakeContext(const ClusterAccess& cluster,
                                                 absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
  if (!cluster.token.empty()) ctx->AddMetadata("authorization", "Bearer " + cluster.token);
  return ctx;
}

}  // namespace exa::tools
