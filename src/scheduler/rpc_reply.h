// How the scheduler's RPC handlers answer (docs/architecture.md#flows): at once, with a status
// whose message is cut to fit gRPC's metadata.
//
// Thread safety: pure functions.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/strings.h"

namespace exa::scheduler {

// Error messages quote what the caller sent (a spec or node name); a long one would push the
// status past gRPC's metadata limit, and the caller would get RESOURCE_EXHAUSTED about metadata
// instead of the error. Messages are cut to 1 KiB.
inline grpc::Status Clamped(const grpc::Status& s) {
  constexpr size_t kMaxMessage = 1024;
  if (s.error_message().size() <= kMaxMessage) return s;
  return grpc::Status(s.error_code(), StrCat(s.error_message().substr(0, kMaxMessage), "... (",
                                             s.error_message().size(), " bytes in all)"));
}

inline grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                        const grpc::Status& s) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(Clamped(s));
  return reactor;
}

}  // namespace exa::scheduler
