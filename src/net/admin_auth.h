// What every service that changes a node or the cluster asks before it acts
// (docs/security.md#admin-rpcs): one authorizer the daemon builds, called with the call's context
// and the method's name ("Node.StopReplica"), so that each decision can be checked and audited in
// one place.
//
// Thread safety: AuthorizationOf and PeerOf read only the context.
#pragma once

#include <grpcpp/server_context.h>

#include <functional>
#include <string>
#include <string_view>

namespace exa::net {

// OK to proceed, or the status to answer with (UNAUTHENTICATED, RESOURCE_EXHAUSTED) naming why.
using AdminAuthorizer =
    std::function<grpc::Status(const grpc::ServerContextBase& context, std::string_view method)>;

// The call's "authorization" metadata ("Bearer <token>"), or "" when absent.
std::string_view AuthorizationOf(const grpc::ServerContextBase& context);

// The caller's address without the port and the transport prefix: "10.0.0.7", "::1".
std::string PeerAddressOf(const grpc::ServerContextBase& context);

// The caller's certificate identity (its subject alternative name or common name) under mutual
// TLS; "" on a plain connection.
std::string PeerIdentityOf(const grpc::ServerContextBase& context);

}  // namespace exa::net
