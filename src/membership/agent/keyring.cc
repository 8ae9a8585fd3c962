#include "membership/agent/keyring.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <fstream>

#include "common/strings.h"

namespace exa::membership {
namespace {

constexpr uint8_t kSealVersion = 1;
constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;

struct CtxDeleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxDeleter>;

bool Decrypt(const std::string& key, std::string_view aad, std::string_view sealed,
             std::string* out) {
  const auto* nonce = reinterpret_cast<const unsigned char*>(sealed.data() + 1);
  std::string_view body = sealed.substr(1 + kNonceBytes, sealed.size() - kSealOverheadBytes);
  std::string tag(sealed.substr(sealed.size() - kTagBytes));
  Ctx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  out->resize(body.size());
  auto* dst = reinterpret_cast<unsigned char*>(out->data());
  return EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                            reinterpret_cast<const unsigned char*>(key.data()), nonce) == 1 &&
         EVP_DecryptUpdate(ctx.get(), nullptr, &len,
                           reinterpret_cast<const unsigned char*>(aad.data()),
                           static_cast<int>(aad.size())) == 1 &&
         EVP_DecryptUpdate(ctx.get(), dst, &len,
                           reinterpret_cast<const unsigned char*>(body.data()),
                           static_cast<int>(body.size())) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) == 1 &&
         EVP_DecryptFinal_ex(ctx.get(), dst + len, &len) == 1;
}

}  // namespace

bool Keyring::enabled() const {
  absl::MutexLock lock(&mu_);
  return !keys_.empty();
}

absl::Status Keyring::Install(std::string key) {
  if (key.size() != kKeyBytes) {
    return absl::InvalidArgumentError(
        StrCat("gossip key: expected ", kKeyBytes, " bytes (AES-256), got ", key.size()));
  }
  absl::MutexLock lock(&mu_);
  if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) keys_.push_back(std::move(key));
  return absl::OkStatus();
}

absl::Status Keyring::Use(std::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(keys_.begin(), keys_.end(), key);
  if (it == keys_.end()) return absl::NotFoundError("gossip key: not installed; install it first");
  std::rotate(keys_.begin(), it, it + 1);
  return absl::OkStatus();
}

absl::Status Keyring::Remove(std::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(keys_.begin(), keys_.end(), key);
  if (it == keys_.end()) return absl::NotFoundError("gossip key: not installed");
  if (it == keys_.begin()) {
    return absl::FailedPreconditionError(
        "gossip key: the primary key cannot be removed; make another key primary first");
  }
  keys_.erase(it);
  return absl::OkStatus();
}

std::vector<std::string> Keyring::Keys() const {
  absl::MutexLock lock(&mu_);
  return keys_;
}

std::string Keyring::Seal(std::string_view plain) const {
  std::string key;
  {
    absl::MutexLock lock(&mu_);
    if (keys_.empty()) return std::string(plain);
    key = keys_.front();
  }
  std::string out(kSealOverheadBytes + plain.size(), '\0');
  out[0] = static_cast<char>(kSealVersion);
  auto* nonce = reinterpret_cast<unsigned char*>(out.data() + 1);
  RAND_bytes(nonce, kNonceBytes);
  Ctx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  auto* dst = reinterpret_cast<unsigned char*>(out.data() + 1 + kNonceBytes);
  EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                     reinterpret_cast<const unsigned char*>(key.data()), nonce);
  EVP_EncryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(aad_.data()),
                    static_cast<int>(aad_.size()));
  EVP_EncryptUpdate(ctx.get(), dst, &len, reinterpret_cast<const unsigned char*>(plain.data()),
                    static_cast<int>(plain.size()));
  EVP_EncryptFinal_ex(ctx.get(), dst + len, &len);
  EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes,
                      out.data() + out.size() - kTagBytes);
  return out;
}

absl::StatusOr<std::string> Keyring::Open(std::string_view sealed) const {
  std::vector<std::string> keys = Keys();
  if (keys.empty()) return std::string(sealed);
  if (sealed.size() < kSealOverheadBytes || static_cast<uint8_t>(sealed[0]) != kSealVersion) {
    return absl::InvalidArgumentError("sealed packet: too short or unknown version");
  }
  std::string plain;
  for (const std::string& key : keys) {
    if (Decrypt(key, aad_, sealed, &plain)) return plain;
  }
  return absl::PermissionDeniedError("sealed packet: no installed key opens it");
}

std::string Keyring::EncodeBase64(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(raw.data()),
                          static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string Keyring::GenerateBase64() {
  std::string key(kKeyBytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), kKeyBytes);
  return EncodeBase64(key);
}

absl::StatusOr<std::string> Keyring::DecodeBase64Key(std::string_view input) {
  std::string_view text = StripWhitespace(input);
  // 32 bytes encode to 44 characters with one '=' of padding.
  if (text.size() != 44) {
    return absl::InvalidArgumentError(StrCat("gossip key \"", text.substr(0, 8),
                                             "...\": expected 44 base64 characters (32 bytes; "
                                             "make one with exaserve-cli gossip keygen)"));
  }
  std::string out(33, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n != 33 || text.back() != '=') {
    return absl::InvalidArgumentError("gossip key: not valid base64 of 32 bytes");
  }
  out.resize(kKeyBytes);
  return out;
}

absl::StatusOr<std::vector<std::string>> Keyring::ReadKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("gossip key file ", path, ": cannot read"));
  std::vector<std::string> keys;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (StripWhitespace(line).empty() || StripWhitespace(line)[0] == '#') continue;
    auto key = DecodeBase64Key(line);
    if (!key.ok()) {
      return absl::InvalidArgumentError(
          StrCat(path, ":", line_number, ": ", ToStd(key.status().message())));
    }
    keys.push_back(*std::move(key));
  }
  if (keys.empty()) return absl::InvalidArgumentError(StrCat(path, ": no key in the file"));
  return keys;
}

}  // namespace exa::membership
