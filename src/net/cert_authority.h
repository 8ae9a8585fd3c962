// A throwaway cluster CA for a quick secure set-up (`exaserve-cli certs init`): an ECDSA P-256
// CA and, signed by it, one certificate per node (server and client use) and one for operators'
// tools (client use). Every node certificate names the node, `exaserve-node` (the name TLS
// clients check, net/tls.h), `localhost` and 127.0.0.1, plus the node name as an IP address when
// it is one. Sites with their own PKI issue equivalent certificates and skip this.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::net {

struct CertsInitOptions {
  std::string out_dir;
  std::vector<std::string> nodes;  // file and certificate names: [A-Za-z0-9._-]+
  int days = 365;                  // validity of every certificate
  bool force = false;              // overwrite existing files
  // Further files written beside the certificates, mode 0600 (the CLI adds the gossip key and
  // admin and API credentials): file name, contents.
  std::vector<std::pair<std::string, std::string>> secret_files;
};

// Writes ca.pem, ca-key.pem, <node>.pem, <node>-key.pem for each node, and client.pem,
// client-key.pem, then `secret_files`. Keys are mode 0600. Refuses (ALREADY_EXISTS, naming the
// file) to overwrite unless `force`. Returns the paths written.
absl::StatusOr<std::vector<std::string>> WriteClusterCerts(const CertsInitOptions& options);

// Name validation shared with the CLI's usage errors: empty when `name` can be a node name here.
std::string ValidateCertName(const std::string& name);

}  // namespace exa::net
