// exaserve-cli's credential commands (security_commands.h).
#include "tools/security_commands.h"

#include <algorithm>
#include <iostream>

#include "gateway/api_keys.h"
#include "membership/agent/keyring.h"
#include "tools/cli_common.h"

namespace exa::tools {

// `certs init`: everything `exaserved --secure` needs, in one directory.
int RunCertsInit(net::CertsInitOptions options, const std::string& nodes) {
  for (size_t start = 0; start <= nodes.size();) {
    size_t comma = std::min(nodes.find(',', start), nodes.size());
    options.nodes.push_back(nodes.substr(start, comma - start));
    start = comma + 1;
  }
  const std::string admin_token = gateway::ApiKeys::NewKey();
  const std::string api_key = gateway::ApiKeys::NewKey();
  options.secret_files = {
      {"gossip.key", membership::Keyring::GenerateBase64() + "\n"},
      {"admin.token", admin_token + "\n"},
      {"admin-tokens", "admin:" + gateway::ApiKeys::Sha256Hex(admin_token) + "\n"},
      {"api.key", api_key + "\n"},
      {"api-keys", "default:" + gateway::ApiKeys::Sha256Hex(api_key) + "\n"},
  };
  auto written = net::WriteClusterCerts(options);
  if (!written.ok()) {
    if (written.status().code() == absl::StatusCode::kInvalidArgument ||
        written.status().code() == absl::StatusCode::kAlreadyExists) {
      return Usage(std::string(written.status().message()));
    }
    return Failure(std::string(written.status().message()));
  }
  for (const std::string& path : *written) std::cout << "wrote " << path << "\n";
  const std::string& d = options.out_dir;
  std::cout << "\nstart a node (here " << options.nodes.front() << ") with:\n  exaserved --secure"
            << " --node-id " << options.nodes.front() << " --tls-ca " << d << "/ca.pem --tls-cert "
            << d << "/" << options.nodes.front() << ".pem --tls-key " << d << "/"
            << options.nodes.front() << "-key.pem --gossip-key-file " << d
            << "/gossip.key --admin-token-file " << d << "/admin-tokens --api-keys-file " << d
            << "/api-keys --node-token-file " << d
            << "/admin.token\nand call it with:\n  EXASERVE_TLS_CA=" << d
            << "/ca.pem EXASERVE_TLS_CERT=" << d << "/client.pem EXASERVE_TLS_KEY=" << d
            << "/client-key.pem EXASERVE_TOKEN=$(cat " << d
            << "/admin.token) exaserve-cli members\n";
  return 0;
}

}  // namespace exa::tools
