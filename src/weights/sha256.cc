#include "weights/sha256.h"

#include <openssl/evp.h>

#include "common/check.h"

namespace exa::weights {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  Ctx() : md(EVP_MD_CTX_new()) {
    EXA_CHECK(md != nullptr && EVP_DigestInit_ex(md, EVP_sha256(), nullptr) == 1)
        << "OpenSSL SHA-256 init failed";
  }
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(const void* data, size_t size) {
  if (size == 0) return;
  EXA_CHECK(EVP_DigestUpdate(ctx_->md, data, size) == 1) << "OpenSSL SHA-256 update failed";
}

std::string Sha256::FinalHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXA_CHECK(EVP_DigestFinal_ex(ctx_->md, digest, &len) == 1 && len == 32)
      << "OpenSSL SHA-256 final failed";
  EXA_CHECK(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1) << "OpenSSL SHA-256 reinit";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.FinalHex();
}

bool IsSha256Hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace exa::weights
