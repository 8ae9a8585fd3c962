// gRPC server plumbing: one listening port, services registered by the daemon, the standard
// grpc.health.v1.Health service (overall "" and per registered service), server reflection,
// message-size and stream limits, and a bounded shutdown.
//
// Thread safety: RegisterService before Start; SetServing and Shutdown from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/schema.h"
#include "net/tls.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace exa::net {

struct GrpcServerOptions {
  std::string bind_address = "0.0.0.0";
  uint16_t port = 7070;
  config::Bytes max_message_bytes{16 << 20};  // a 4k-token prompt as ids is ~16 KiB; room to spare
  int max_concurrent_streams = 1024;          // per HTTP/2 connection
  absl::Duration keepalive_time = absl::Seconds(30);
  TlsOptions tls;  // enabled: mutual TLS, every client must present a certificate the CA signed
};

void RegisterConfig(config::Schema& schema, std::string_view section, GrpcServerOptions* options);

class GrpcServer {
 public:
  explicit GrpcServer(GrpcServerOptions options);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // The service must outlive the server.
  void RegisterService(grpc::Service* service);
  // Binds and starts. Fails with the address when the port is taken.
  absl::Status Start();
  uint16_t port() const { return bound_port_; }
  // Sets the grpc.health.v1 status, overall ("") and of every registered service: SERVING or
  // NOT_SERVING. Each is NOT_SERVING from Start until the first SetServing(true).
  void SetServing(bool serving);
  // Stops accepting calls and waits for running ones up to `deadline`, then cancels the rest.
  void Shutdown(absl::Time deadline);

 private:
  const GrpcServerOptions options_;
  std::vector<grpc::Service*> services_;
  std::unique_ptr<grpc::Server> server_;
  uint16_t bound_port_ = 0;
};

}  // namespace exa::net
