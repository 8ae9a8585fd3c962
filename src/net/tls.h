// Mutual TLS for every gRPC connection between ExaServe processes.
//
// One cluster CA signs every node's certificate (`exaserve-cli certs init`). With TLS configured
// a node's gRPC server demands and verifies a client certificate signed by that CA, and every
// channel this process opens presents the node's own certificate. Certificates name the shared
// identity `exaserve-node` (besides the node's own names), which clients verify instead of the
// dialled address: nodes are reached by whatever address gossip advertises, and what matters is
// that the peer holds a key the cluster CA signed.
//
// Thread safety: UseClientTls once at start, before any channel is made; NewChannel and
// ClientCredentials from any thread after that.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/schema.h"

namespace exa::net {

inline constexpr char kClusterServerName[] = "exaserve-node";

struct TlsOptions {
  std::string ca_file;    // PEM: the cluster CA; peers must present a certificate it signed
  std::string cert_file;  // PEM: this process's certificate (server and client)
  std::string key_file;   // PEM: its private key
  std::string server_name = kClusterServerName;  // the name checked on servers' certificates

  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

void RegisterConfig(config::Schema& schema, std::string_view section, TlsOptions* options);

// The three PEM files, read and checked: all three or none are set; each parses; the key matches
// the certificate; the certificate is within its validity period and signed by the CA. Errors
// name the file and what is wrong with it. `require_cert` false allows a CA alone (a client that
// only verifies the server).
struct TlsMaterial {
  std::string ca_pem, cert_pem, key_pem;
};
absl::StatusOr<TlsMaterial> LoadTls(const TlsOptions& options, bool require_cert = true);

// Server credentials: TLS that requires and verifies a client certificate from the CA; plain
// (insecure) when `options` is not enabled.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsOptions& options);

// Makes every later NewChannel use TLS with `options` (a CA alone: server verification only, for
// tools without a certificate). Not calling it leaves channels plain.
absl::Status UseClientTls(const TlsOptions& options);

// The process's channel credentials (plain unless UseClientTls succeeded).
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials();

// Arguments for a channel between nodes: HTTP/2 keepalive pings every 5 s (2 s to answer), also
// with no call in flight, so a peer lost to a partition or a crash is noticed in seconds and
// later calls open a fresh connection instead of queueing behind a TCP connection in
// retransmission backoff for minutes; reconnects back off at most 5 s. GrpcServer accepts
// pings this often.
grpc::ChannelArguments PeerChannelArgs();

// Works around gRPC 1.51 (Debian 12) reporting an in-progress connect as failed. Its
// tcp_client_posix reads errno after calls that may change it (fixed upstream in grpc#35064);
// the first contended absl::Mutex of a process measures the TSC once and leaves errno = ENOENT
// (no /sys/.../tsc_freq_khz), so one early connect failed with "No such file or directory" and
// its RPC with UNAVAILABLE. Calling this before any channel or server exists does that
// measurement up front. Idempotent and thread-safe; NewChannel and GrpcServer::Start call it.
void PrepareGrpcProcess();

// A channel to `target` (host:port) with the process's credentials; with TLS, `args` gains the
// name checked on the server's certificate.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& target,
                                          grpc::ChannelArguments args = {});

}  // namespace exa::net
