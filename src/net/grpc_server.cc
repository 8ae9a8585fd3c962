#include "net/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <grpcpp/impl/server_initializer.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/time/clock.h"
#include "common/check.h"
#include "common/status.h"
#include "common/strings.h"
#include "net/tls.h"

namespace exa::net {
namespace {

// Copies the names of the services a server registered (gRPC keeps the list private to its
// plugins), so that grpc.health.v1 can answer for each by name (docs/reference/api.md#grpc-health).
class ServiceNamesPlugin : public grpc::ServerBuilderPlugin {
 public:
  explicit ServiceNamesPlugin(std::vector<std::string>* names) : names_(names) {}
  std::string name() override { return "exa_service_names"; }
  void InitServer(grpc::ServerInitializer*) override {}
  void Finish(grpc::ServerInitializer* si) override {
    if (const std::vector<std::string>* list = si->GetServiceList()) *names_ = *list;
  }
  void ChangeArguments(const std::string&, void*) override {}

 private:
  std::vector<std::string>* names_;
};

class ServiceNamesOption : public grpc::ServerBuilderOption {
 public:
  explicit ServiceNamesOption(std::vector<std::string>* names) : names_(names) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->push_back(std::make_unique<ServiceNamesPlugin>(names_));
  }

 private:
  std::vector<std::string>* names_;
};

}  // namespace

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
  // Server reflection: grpcurl and other tools list and call services without the .proto files
  // (docs/reference/api.md#grpc-health).
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
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
  std::vector<std::string> names;
  builder.SetOption(std::make_unique<ServiceNamesOption>(&names));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected_port == 0) {
    server_.reset();
    return absl::UnavailableError(StrCat("cannot listen on ", address, " (gRPC)"));
  }
  bound_port_ = static_cast<uint16_t>(selected_port);
  // Every service (and the overall "") is NOT_SERVING until SetServing(true): the node is not
  // ready yet. gRPC's own services (health, reflection) have no status of their own.
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    for (const std::string& name : names) {
      if (name.rfind("grpc.", 0) != 0) health->SetServingStatus(name, false);
    }
    health->SetServingStatus(false);
  }
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
