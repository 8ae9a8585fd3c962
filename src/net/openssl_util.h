// Owning pointers for the OpenSSL objects net/ uses, and the error queue as text. Private to
// net/ (tls.cc, cert_authority.cc).
#pragma once

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>
#include <string>

namespace exa::net {

template <typename T, void (*Free)(T*)>
struct OpenSslFree {
  void operator()(T* p) const { Free(p); }
};

using UniqueBio = std::unique_ptr<BIO, OpenSslFree<BIO, BIO_free_all>>;
using UniqueX509 = std::unique_ptr<X509, OpenSslFree<X509, X509_free>>;
using UniqueKey = std::unique_ptr<EVP_PKEY, OpenSslFree<EVP_PKEY, EVP_PKEY_free>>;
using UniqueBignum = std::unique_ptr<BIGNUM, OpenSslFree<BIGNUM, BN_free>>;
using UniqueStore = std::unique_ptr<X509_STORE, OpenSslFree<X509_STORE, X509_STORE_free>>;
using UniqueStoreCtx =
    std::unique_ptr<X509_STORE_CTX, OpenSslFree<X509_STORE_CTX, X509_STORE_CTX_free>>;

// The oldest error in this thread's OpenSSL queue as text ("unknown error" when empty); the
// queue is cleared.
inline std::string OpenSslErrorText() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  char buf[256] = "unknown error";
  if (code != 0) ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

}  // namespace exa::net
