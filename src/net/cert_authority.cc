#include "net/cert_authority.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "common/chars.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "net/openssl_util.h"
#include "net/tls.h"

namespace exa::net {
namespace {

absl::Status OpenSslFailure(std::string_view what) {
  return absl::InternalError(StrCat("certs: ", what, ": ", OpenSslErrorText()));
}

absl::StatusOr<UniqueKey> NewKey() {
  UniqueKey key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslFailure("generating a P-256 key");
  return key;
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslFailure(StrCat("extension ", OBJ_nid2sn(nid), "=", value));
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return OpenSslFailure(StrCat("adding extension ", OBJ_nid2sn(nid)));
  return absl::OkStatus();
}

enum class Kind { kCa, kNode, kClient };

bool IsIpAddress(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// A certificate for `key` named `common_name`, signed by (issuer, issuer_key), or self-signed
// when issuer is null.
absl::StatusOr<UniqueX509> Issue(Kind kind, const std::string& common_name, EVP_PKEY* key,
                                 X509* issuer, EVP_PKEY* issuer_key, int days) {
  UniqueX509 cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return OpenSslFailure("new certificate");
  UniqueBignum serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return OpenSslFailure("serial number");
  }
  // Five minutes of slack for clocks a little behind the one that issued it.
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -300);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400L);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("ExaServe"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  EXA_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  if (kind == Kind::kCa) {
    EXA_RETURN_IF_ERROR(
        AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    EXA_RETURN_IF_ERROR(
        AddExtension(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    EXA_RETURN_IF_ERROR(
        AddExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid:always"));
    EXA_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
    EXA_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature"));
    EXA_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_ext_key_usage,
                                     kind == Kind::kNode ? "serverAuth,clientAuth" : "clientAuth"));
    if (kind == Kind::kNode) {
      std::string san = StrCat("DNS:", kClusterServerName, ",DNS:localhost,IP:127.0.0.1");
      StrAppend(&san, IsIpAddress(common_name) ? ",IP:" : ",DNS:", common_name);
      EXA_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_alt_name, san));
    }
  }
  if (X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    return OpenSslFailure(StrCat("signing ", common_name));
  }
  return cert;
}

absl::StatusOr<std::string> ToPem(X509* cert, EVP_PKEY* key) {
  UniqueBio bio(BIO_new(BIO_s_mem()));
  int ok = cert != nullptr
               ? PEM_write_bio_X509(bio.get(), cert)
               : PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  if (ok != 1) return OpenSslFailure("PEM encoding");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

std::string ValidateCertName(const std::string& name) {
  if (name.empty()) return "a node name must not be empty";
  if (name.size() > 64) return StrCat(name, ": longer than 64 characters");
  if (!OnlyAlnumOr(name, ".-_:")) {
    return StrCat(name, ": only letters, digits, '.', '-', '_' and ':' are allowed");
  }
  if (name == "ca" || name == "client") return StrCat(name, ": reserved for the CA/client files");
  return "";
}

absl::StatusOr<std::vector<std::string>> WriteClusterCerts(const CertsInitOptions& o) {
  if (o.nodes.empty()) return absl::InvalidArgumentError("--nodes: name at least one node");
  if (o.days < 1 || o.days > 3650) {
    return absl::InvalidArgumentError(StrCat("--days ", o.days, ": expected 1-3650"));
  }
  std::set<std::string> seen;
  for (const std::string& n : o.nodes) {
    if (std::string e = ValidateCertName(n); !e.empty()) {
      return absl::InvalidArgumentError(StrCat("--nodes: ", e));
    }
    if (!seen.insert(n).second) {
      return absl::InvalidArgumentError(StrCat("--nodes: ", n, " is listed twice"));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return absl::UnavailableError(StrCat("--out ", o.out_dir, ": ", ec.message()));

  struct Output {
    std::string path, contents;
    mode_t mode;
  };
  std::vector<Output> outputs;
  auto add = [&](const std::string& stem, X509* cert, EVP_PKEY* key) -> absl::Status {
    EXA_ASSIGN_OR_RETURN(std::string cert_pem, ToPem(cert, nullptr));
    EXA_ASSIGN_OR_RETURN(std::string key_pem, ToPem(nullptr, key));
    outputs.push_back({StrCat(o.out_dir, "/", stem, ".pem"), std::move(cert_pem), 0644});
    outputs.push_back({StrCat(o.out_dir, "/", stem, "-key.pem"), std::move(key_pem), 0600});
    return absl::OkStatus();
  };
  EXA_ASSIGN_OR_RETURN(UniqueKey ca_key, NewKey());
  EXA_ASSIGN_OR_RETURN(UniqueX509 ca, Issue(Kind::kCa, "ExaServe cluster CA", ca_key.get(), nullptr,
                                            nullptr, o.days));
  EXA_RETURN_IF_ERROR(add("ca", ca.get(), ca_key.get()));
  for (const std::string& node : o.nodes) {
    EXA_ASSIGN_OR_RETURN(UniqueKey key, NewKey());
    EXA_ASSIGN_OR_RETURN(UniqueX509 cert,
                         Issue(Kind::kNode, node, key.get(), ca.get(), ca_key.get(), o.days));
    EXA_RETURN_IF_ERROR(add(node, cert.get(), key.get()));
  }
  EXA_ASSIGN_OR_RETURN(UniqueKey client_key, NewKey());
  EXA_ASSIGN_OR_RETURN(UniqueX509 client, Issue(Kind::kClient, "exaserve-cli", client_key.get(),
                                                ca.get(), ca_key.get(), o.days));
  EXA_RETURN_IF_ERROR(add("client", client.get(), client_key.get()));

  for (const auto& [name, contents] : o.secret_files) {
    outputs.push_back({StrCat(o.out_dir, "/", name), contents, 0600});
  }
  if (!o.force) {
    for (const Output& out : outputs) {
      if (std::filesystem::exists(out.path)) {
        return absl::AlreadyExistsError(
            StrCat(out.path, " exists; nothing was written (--force overwrites)"));
      }
    }
  }
  std::vector<std::string> written;
  for (const Output& out : outputs) {
    EXA_RETURN_IF_ERROR(WriteFileAtomically(out.path, out.contents, out.mode));
    written.push_back(out.path);
  }
  return written;
}

}  // namespace exa::net
