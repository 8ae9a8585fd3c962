#include "net/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <fstream>
#include <sstream>

#include "absl/base/internal/sysinfo.h"
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "net/openssl_util.h"

namespace exa::net {
namespace {

// The PEM file named by option `key`. A certificate chain or key is a few KiB: 1 MiB is far past
// any real one.
absl::StatusOr<std::string> ReadPem(const std::string& path, std::string_view key) {
  constexpr size_t kMaxPemBytes = size_t{1} << 20;
  absl::StatusOr<std::string> pem = ReadFile(path, kMaxPemBytes);
  if (pem.status().code() == absl::StatusCode::kNotFound) {
    return absl::InvalidArgumentError(StrCat(key, " ", path, ": cannot be read"));
  }
  if (!pem.ok()) return absl::InvalidArgumentError(StrCat(key, " ", pem.status().message()));
  if (pem->empty()) return absl::InvalidArgumentError(StrCat(key, " ", path, ": empty"));
  return pem;
}

UniqueBio PemBio(const std::string& pem) {
  return UniqueBio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<UniqueX509> ParseCert(const std::string& pem, std::string_view what) {
  auto bio = PemBio(pem);
  UniqueX509 cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return absl::InvalidArgumentError(
        StrCat(what, ": not a PEM certificate (", OpenSslErrorText(), ")"));
  }
  return cert;
}

}  // namespace

void RegisterConfig(config::Schema& schema, std::string_view section, TlsOptions* options) {
  std::string s(section);
  schema.Add(s + ".ca_file", &options->ca_file,
             "PEM cluster CA; with cert_file and key_file, every gRPC connection is mutual TLS");
  schema.Add(s + ".cert_file", &options->cert_file,
             "PEM certificate of this node, signed by the CA (exaserve-cli certs init)");
  schema.Add(s + ".key_file", &options->key_file, "PEM private key of cert_file");
  schema.Add<std::string>(
      s + ".server_name", &options->server_name,
      "name checked on servers' certificates (certs init puts exaserve-node "
      "in every node certificate)",
      [](const std::string& v) { return v.empty() ? "must not be empty" : ""; });
}

absl::StatusOr<TlsMaterial> LoadTls(const TlsOptions& o, bool require_cert) {
  if (o.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.ca_file is required with tls.cert_file / tls.key_file (the CA that signs peers)");
  }
  if (require_cert && (o.cert_file.empty() || o.key_file.empty())) {
    return absl::InvalidArgumentError(
        StrCat("TLS needs tls.ca_file, tls.cert_file and tls.key_file together; missing ",
               o.cert_file.empty() ? "tls.cert_file" : "",
               o.cert_file.empty() && o.key_file.empty() ? " and " : "",
               o.key_file.empty() ? "tls.key_file" : ""));
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.cert_file and tls.key_file go together: set both or neither");
  }
  TlsMaterial m;
  EXA_ASSIGN_OR_RETURN(m.ca_pem, ReadPem(o.ca_file, "tls.ca_file"));
  EXA_ASSIGN_OR_RETURN(UniqueX509 ca, ParseCert(m.ca_pem, StrCat("tls.ca_file ", o.ca_file)));
  if (o.cert_file.empty()) return m;
  EXA_ASSIGN_OR_RETURN(m.cert_pem, ReadPem(o.cert_file, "tls.cert_file"));
  EXA_ASSIGN_OR_RETURN(m.key_pem, ReadPem(o.key_file, "tls.key_file"));
  EXA_ASSIGN_OR_RETURN(UniqueX509 cert,
                       ParseCert(m.cert_pem, StrCat("tls.cert_file ", o.cert_file)));
  auto key_bio = PemBio(m.key_pem);
  UniqueKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return absl::InvalidArgumentError(
        StrCat("tls.key_file ", o.key_file, ": not a PEM private key (", OpenSslErrorText(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        StrCat("tls.key_file ", o.key_file, ": does not match tls.cert_file ", o.cert_file));
  }
  // Verify the chain now, so an expired or foreign certificate fails at start with its name
  // instead of as an opaque handshake error on every peer.
  UniqueStore store(X509_STORE_new());
  UniqueStoreCtx ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    return absl::InternalError(StrCat("TLS: cannot set up verification: ", OpenSslErrorText()));
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::InvalidArgumentError(StrCat("tls.cert_file ", o.cert_file,
                                             ": not valid under tls.ca_file ", o.ca_file, ": ",
                                             X509_verify_cert_error_string(err)));
  }
  return m;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsOptions& o) {
  if (!o.enabled()) return grpc::InsecureServerCredentials();
  EXA_ASSIGN_OR_RETURN(TlsMaterial m, LoadTls(o));
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = m.ca_pem;
  ssl.pem_key_cert_pairs.push_back({m.key_pem, m.cert_pem});
  return grpc::SslServerCredentials(ssl);
}

namespace {

struct ClientTls {
  absl::Mutex mu;
  std::shared_ptr<grpc::ChannelCredentials> credentials ABSL_GUARDED_BY(mu);  // null: plain
  std::string server_name ABSL_GUARDED_BY(mu);
};

ClientTls& Client() {
  PrepareGrpcProcess();                      // before the first contended absl::Mutex (see tls.h)
  static ClientTls* client = new ClientTls;  // never destroyed: channels may outlive main
  return *client;
}

}  // namespace

absl::Status UseClientTls(const TlsOptions& o) {
  EXA_ASSIGN_OR_RETURN(TlsMaterial m, LoadTls(o, /*require_cert=*/false));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = m.ca_pem;
  ssl.pem_private_key = m.key_pem;
  ssl.pem_cert_chain = m.cert_pem;
  ClientTls& c = Client();
  absl::MutexLock lock(&c.mu);
  c.credentials = grpc::SslCredentials(ssl);
  c.server_name = o.server_name;
  return absl::OkStatus();
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials() {
  ClientTls& c = Client();
  absl::MutexLock lock(&c.mu);
  return c.credentials ? c.credentials : grpc::InsecureChannelCredentials();
}

grpc::ChannelArguments PeerChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);  // back within 5 s of a heal
  return args;
}

void PrepareGrpcProcess() {
  static const double kFrequency = absl::base_internal::NominalCPUFrequency();
  (void)kFrequency;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& target, grpc::ChannelArguments args) {
  PrepareGrpcProcess();
  ClientTls& c = Client();
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  {
    absl::MutexLock lock(&c.mu);
    credentials = c.credentials;
    if (credentials) args.SetSslTargetNameOverride(c.server_name);
  }
  if (!credentials) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, credentials, args);
}

}  // namespace exa::net
