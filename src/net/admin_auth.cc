#include "net/admin_auth.h"

#include <grpcpp/security/auth_context.h>

namespace exa::net {

std::string_view AuthorizationOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

std::string PeerAddressOf(const grpc::ServerContextBase& context) {
  // gRPC writes "ipv4:10.0.0.7:5000", "ipv6:[::1]:5000" or "unix:/path".
  const std::string peer = context.peer();
  std::string_view p = peer;
  const size_t scheme = p.find(':');
  if (scheme == std::string_view::npos) return peer;
  const std::string_view kind = p.substr(0, scheme);
  p.remove_prefix(scheme + 1);
  if (kind == "ipv6" && !p.empty() && p.front() == '[') {
    return std::string(p.substr(1, p.find(']') - 1));
  }
  if (kind == "ipv4") return std::string(p.substr(0, p.rfind(':')));
  return std::string(p);
}

std::string PeerIdentityOf(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return {};
  std::vector<grpc::string_ref> identity = auth->GetPeerIdentity();
  if (identity.empty()) return {};
  return std::string(identity.front().data(), identity.front().size());
}

}  // namespace exa::net
