#include "net/grpc_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/time/clock.h"
#include "common/check.h"
#include "common/status.h"
#include "common/strings.h"
#include "net/tls.h"

namespace exa::net {

void RegisterConfig(config::Schema& schema, std::string_view section, GrpcServerOptions* options) {
  std::string s(section);
  // gRPC keeps it in an int; below a few KiB no status or membership answer fits.
  schema.Add(s + ".max_message_bytes", &options->max_message_bytes,
             "largest gRPC message received or sent", config::BytesBetween(64 << 10, INT32_MAX));
  schema.Add<int>(s + ".max_concurrent_streams", &options->max_concurrent_streams,
                  "concurrent calls per client connection",
                  [](const int& v) { return v > 0 ? "" : StrCat(v, ": must be positive"); });
  schema.Add(s + ".keepalive_time", &options->keepalive_time,
             "HTTP/2 keepalive ping interval on idle connections",
             config::Validator<absl::Duration>(config::PositiveDuration));
}

GrpcServer::GrpcServer(GrpcServerOptions options) : options_(std::move(options)) {}

GrpcServer::~GrpcServer() {
  if (server_) Shutdown(absl::Now());
}

void GrpcServer::RegisterService(grpc::Service* service) {
  EXA_CHECK(server_ == nullptr) << "services are registered before Start";
  services_.push_back(service);
}

absl::Status GrpcServer::Start() {
  PrepareGrpcProcess();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  std::string host = options_.bind_address.find(':') != std::string::npos
                         ? StrCat("[", options_.bind_address, "]")
                         : options_.bind_address;
  std::string address = StrCat(host, ":", options_.port);
  int selected_port = 0;
  EXA_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                       ServerCredentials(options_.tls));
  builder.AddListeningPort(address, credentials, &selected_port);
  int max_message =
      static_cast<int>(std::min<uint64_t>(options_.max_message_bytes.value, INT32_MAX));
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
  // Peers ping every 5 s on idle connections (net::PeerChannelArgs): allow it rather than
  // answering with GOAWAY too_many_pings.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 4000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // One port per daemon: a second process must fail to bind instead of sharing it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* s : services_) builder.RegisterService(s);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected_port == 0) {
    server_.reset();
    return absl::UnavailableError(StrCat("cannot listen on ", address, " (gRPC)"));
  }
  bound_port_ = static_cast<uint16_t>(selected_port);
  return absl::OkStatus();
}

void GrpcServer::SetServing(bool serving) {
  if (server_ && server_->GetHealthCheckService()) {
    server_->GetHealthCheckService()->SetServingStatus(serving);
  }
}

void GrpcServer::Shutdown(absl::Time deadline) {
  if (!server_) return;
  SetServing(false);
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  server_.reset();
}

}  // namespace exa::net
