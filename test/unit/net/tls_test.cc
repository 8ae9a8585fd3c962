// Mutual TLS end to end: `certs init` material passes LoadTls, a gRPC server with it answers a
// client holding a CA-signed certificate, and refuses a plain client, a client without a
// certificate and one whose certificate another CA signed. Bad files fail at start, named.
#include "net/tls.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "exaserve/v1/admin.grpc.pb.h"
#include "net/cert_authority.h"
#include "net/grpc_server.h"

namespace exa::net {
namespace {

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "exa-tls-XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TlsOptions NodeTls(const std::string& dir, const std::string& node) {
  TlsOptions o;
  o.ca_file = dir + "/ca.pem";
  o.cert_file = dir + "/" + node + ".pem";
  o.key_file = dir + "/" + node + "-key.pem";
  return o;
}

// A server needs a service: Admin.Status answering OK stands for every service.
class StatusService final : public exaserve::v1::Admin::CallbackService {
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const exaserve::v1::StatusRequest*,
                                   exaserve::v1::StatusResponse*) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// One Admin.Status call over `channel`.
grpc::Status Call(std::shared_ptr<grpc::Channel> channel) {
  auto stub = exaserve::v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  exaserve::v1::StatusResponse response;
  return stub->Status(&ctx, exaserve::v1::StatusRequest(), &response);
}

std::shared_ptr<grpc::Channel> SslChannel(uint16_t port, const std::string& dir,
                                          const std::string& cert_stem) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = Read(dir + "/ca.pem");
  if (!cert_stem.empty()) {
    ssl.pem_cert_chain = Read(dir + "/" + cert_stem + ".pem");
    ssl.pem_private_key = Read(dir + "/" + cert_stem + "-key.pem");
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(kClusterServerName);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::SslCredentials(ssl),
                                   args);
}

TEST_CASE("certs init writes a CA, node and client certificates that verify") {
  const std::string dir = TempDir();
  CertsInitOptions o{dir, {"node-a", "10.0.0.7"}, 30};
  o.secret_files = {{"gossip.key", "k\n"}};
  auto written = WriteClusterCerts(o);
  REQUIRE(written.ok());
  CHECK(written->size() == 9);  // ca, 2 nodes, client: a cert and a key each; the gossip key
  struct stat st;
  REQUIRE(stat((dir + "/node-a-key.pem").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(stat((dir + "/gossip.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(LoadTls(NodeTls(dir, "node-a")).ok());
  CHECK(LoadTls(NodeTls(dir, "10.0.0.7")).ok());
  CHECK(LoadTls(NodeTls(dir, "client")).ok());

  SECTION("a second run refuses to overwrite, naming the file") {
    auto again = WriteClusterCerts(o);
    REQUIRE(again.status().code() == absl::StatusCode::kAlreadyExists);
    CHECK_THAT(std::string(again.status().message()), Catch::Contains("ca.pem exists"));
    o.force = true;
    CHECK(WriteClusterCerts(o).ok());
  }
  SECTION("bad node names and validity are refused") {
    CertsInitOptions bad{TempDir(), {"a/b"}, 30};
    CHECK_THAT(std::string(WriteClusterCerts(bad).status().message()), Catch::Contains("a/b"));
    bad.nodes = {"x", "x"};
    CHECK_THAT(std::string(WriteClusterCerts(bad).status().message()),
               Catch::Contains("listed twice"));
    bad.nodes = {"ca"};
    CHECK_THAT(std::string(WriteClusterCerts(bad).status().message()), Catch::Contains("reserved"));
    bad.nodes = {"x"};
    bad.days = 0;
    CHECK_THAT(std::string(WriteClusterCerts(bad).status().message()), Catch::Contains("--days"));
  }
}

TEST_CASE("LoadTls names the file that is wrong") {
  const std::string dir = TempDir(), other = TempDir();
  REQUIRE(WriteClusterCerts({dir, {"a", "b"}, 30}).ok());
  REQUIRE(WriteClusterCerts({other, {"a"}, 30}).ok());

  TlsOptions mismatched = NodeTls(dir, "a");
  mismatched.key_file = dir + "/b-key.pem";
  CHECK_THAT(std::string(LoadTls(mismatched).status().message()),
             Catch::Contains("b-key.pem: does not match"));

  TlsOptions foreign = NodeTls(dir, "a");
  foreign.cert_file = other + "/a.pem";
  foreign.key_file = other + "/a-key.pem";
  CHECK_THAT(std::string(LoadTls(foreign).status().message()),
             Catch::Contains("not valid under tls.ca_file"));

  TlsOptions partial = NodeTls(dir, "a");
  partial.key_file.clear();
  CHECK_THAT(std::string(LoadTls(partial).status().message()), Catch::Contains("tls.key_file"));

  TlsOptions missing = NodeTls(dir, "a");
  missing.ca_file = dir + "/nope.pem";
  CHECK_THAT(std::string(LoadTls(missing).status().message()),
             Catch::Contains("nope.pem: cannot be read"));

  TlsOptions garbage = NodeTls(dir, "a");
  garbage.cert_file = dir + "/a-key.pem";  // a key where the certificate belongs
  CHECK_THAT(std::string(LoadTls(garbage).status().message()),
             Catch::Contains("not a PEM certificate"));
}

TEST_CASE("a mutual-TLS gRPC server answers only clients with a certificate from its CA") {
  const std::string dir = TempDir(), other = TempDir();
  REQUIRE(WriteClusterCerts({dir, {"server"}, 30}).ok());
  REQUIRE(WriteClusterCerts({other, {"x"}, 30}).ok());
  GrpcServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  o.tls = NodeTls(dir, "server");
  GrpcServer server(o);
  StatusService service;
  server.RegisterService(&service);
  absl::Status started = server.Start();
  INFO(started.message());
  REQUIRE(started.ok());
  server.SetServing(true);
  const uint16_t port = server.port();

  CHECK(Call(SslChannel(port, dir, "client")).ok());
  CHECK(Call(SslChannel(port, dir, "server")).ok());  // nodes call each other too
  CHECK_FALSE(Call(SslChannel(port, dir, "")).ok());  // no client certificate
  CHECK_FALSE(Call(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials()))
                  .ok());
  // A certificate from another CA, trusting ours for the server side.
  grpc::SslCredentialsOptions foreign;
  foreign.pem_root_certs = Read(dir + "/ca.pem");
  foreign.pem_cert_chain = Read(other + "/x.pem");
  foreign.pem_private_key = Read(other + "/x-key.pem");
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(kClusterServerName);
  CHECK_FALSE(Call(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                             grpc::SslCredentials(foreign), args))
                  .ok());

  SECTION("NewChannel presents the process's certificate once UseClientTls is called") {
    REQUIRE(UseClientTls(NodeTls(dir, "client")).ok());
    CHECK(Call(NewChannel("127.0.0.1:" + std::to_string(port))).ok());
  }
  server.Shutdown(absl::Now());
}

TEST_CASE("a server with a broken key file does not start") {
  const std::string dir = TempDir();
  REQUIRE(WriteClusterCerts({dir, {"a", "b"}, 30}).ok());
  GrpcServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  o.tls = NodeTls(dir, "a");
  o.tls.key_file = dir + "/b-key.pem";
  GrpcServer server(o);
  absl::Status s = server.Start();
  CHECK_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("does not match"));
}

}  // namespace
}  // namespace exa::net
