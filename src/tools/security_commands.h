// exaserve-cli's credential commands: what a cluster needs to run --secure
// (docs/security.md#secure-clusters).
//
// Thread safety: run once from main.
#pragma once

#include <string>

#include "net/cert_authority.h"

namespace exa::tools {

// `certs init`: a CA, node and client certificates, a gossip key, an admin token and an API key
// in `options.out_dir`, for the comma-separated `nodes`; prints how to start a node and call it.
// 0, the usage exit code for bad names or files already there, the failure code otherwise.
int RunCertsInit(net::CertsInitOptions options, const std::string& nodes);

}  // namespace exa::tools
