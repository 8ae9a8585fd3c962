// exaserve-cli: the operator's tool. Talks to any node's gRPC Admin API.
//
// Exit codes: 0 success, 1 the node could not be reached or answered with an error, 2 usage.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "common/strings.h"
#include "common/units.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace {

struct GlobalOptions {
  std::string addr = "127.0.0.1:7070";
  std::string timeout = "5s";
  bool json = false;
  absl::Duration timeout_duration = absl::Seconds(5);
};

int Usage(const std::string& message) {
  std::fprintf(stderr, "exaserve-cli: %s\n", message.c_str());
  return 2;
}

int RpcFailure(const GlobalOptions& g, const grpc::Status& s) {
  std::fprintf(stderr, "exaserve-cli: %s: %s (%d)\n", g.addr.c_str(), s.error_message().c_str(),
               static_cast<int>(s.error_code()));
  return 1;
}

std::unique_ptr<grpc::ClientContext> MakeContext(const GlobalOptions& g) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoNanoseconds(g.timeout_duration));
  return ctx;
}

int RunStatus(const GlobalOptions& g) {
  auto channel = grpc::CreateChannel(g.addr, grpc::InsecureChannelCredentials());
  auto stub = exaserve::v1::Admin::NewStub(channel);
  exaserve::v1::StatusResponse response;
  auto ctx = MakeContext(g);
  grpc::Status s = stub->Status(ctx.get(), exaserve::v1::StatusRequest(), &response);
  if (!s.ok()) return RpcFailure(g, s);
  std::vector<std::string> roles(response.roles().begin(), response.roles().end());
  if (g.json) {
    nlohmann::json j = {{"node_id", response.node_id()},
                        {"roles", roles},
                        {"version", response.version()},
                        {"uptime_seconds", response.uptime_seconds()},
                        {"rack", response.rack()},
                        {"state", response.state()},
                        {"grpc_address", response.grpc_address()},
                        {"http_address", response.http_address()}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::string role_list;
  for (const auto& r : roles) exa::StrAppend(&role_list, role_list.empty() ? "" : ",", r);
  std::cout << "node     " << response.node_id() << "\n"
            << "state    " << response.state() << "\n"
            << "roles    " << role_list << "\n"
            << "rack     " << response.rack() << "\n"
            << "version  " << response.version() << "\n"
            << "uptime   "
            << exa::DurationToString(absl::Seconds(static_cast<int64_t>(response.uptime_seconds())))
            << "\n"
            << "grpc     " << response.grpc_address() << "\n"
            << "http     " << response.http_address() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"exaserve-cli: operate an ExaServe cluster"};
  app.require_subcommand(1);
  GlobalOptions g;
  app.add_option("--addr", g.addr, "gRPC address of any node (default 127.0.0.1:7070)");
  app.add_option("--timeout", g.timeout, "deadline for each call, e.g. 5s (default 5s)");
  app.add_flag("--json", g.json, "print JSON instead of text");
  auto* status = app.add_subcommand("status", "this node's id, roles, version and uptime");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Usage(std::string(e.what()) + "\nRun with --help for the commands.");
  }
  auto timeout = exa::ParseDuration(g.timeout);
  if (!timeout.ok())
    return Usage(std::string("--timeout ") + std::string(timeout.status().message()));
  g.timeout_duration = *timeout;
  if (status->parsed()) return RunStatus(g);
  return Usage("no command given");
}
