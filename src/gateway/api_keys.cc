#include "gateway/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <fstream>

#include "common/strings.h"

namespace exa::gateway {
namespace {

bool IsHex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string ApiKeys::Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string ApiKeys::NewKey() {
  unsigned char bytes[20];
  RAND_bytes(bytes, sizeof(bytes));
  std::string out = "exa-";
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& path, std::string kind) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat(kind, " file ", path, ": cannot read"));
  auto keys = std::unique_ptr<ApiKeys>(new ApiKeys());
  keys->kind_ = std::move(kind);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string_view v = StripWhitespace(line);
    if (v.empty() || v[0] == '#') continue;
    std::string name = StrCat("line-", n);
    if (size_t colon = v.rfind(':'); colon != std::string_view::npos) {
      name = std::string(StripWhitespace(v.substr(0, colon)));
      v = StripWhitespace(v.substr(colon + 1));
    }
    if (!IsHex64(v)) {
      return absl::InvalidArgumentError(
          StrCat(path, ":", n,
                 ": expected a lowercase hex SHA-256 (64 characters), optionally "
                 "after \"name:\"; make one with exaserve-cli apikey new"));
    }
    keys->hash_to_name_[std::string(v)] = name;
  }
  if (keys->hash_to_name_.empty()) {
    return absl::InvalidArgumentError(StrCat(path, ": no key hashes (the API would be closed)"));
  }
  return keys;
}

std::unique_ptr<ApiKeys> ApiKeys::FromToken(std::string name, std::string_view token,
                                            std::string kind) {
  auto keys = std::unique_ptr<ApiKeys>(new ApiKeys());
  keys->kind_ = std::move(kind);
  keys->hash_to_name_[Sha256Hex(token)] = std::move(name);
  return keys;
}

absl::StatusOr<std::string> ApiKeys::Check(std::string_view header) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (header.empty()) {
    return absl::UnauthenticatedError(
        StrCat("missing Authorization header: send \"Bearer <", kind_, ">\""));
  }
  if (header.substr(0, kBearer.size()) != kBearer) {
    return absl::UnauthenticatedError(StrCat("Authorization: expected \"Bearer <", kind_, ">\""));
  }
  std::string hash = Sha256Hex(StripWhitespace(header.substr(kBearer.size())));
  // The lookup is by hash, so timing reveals nothing about the key itself.
  auto it = hash_to_name_.find(hash);
  if (it == hash_to_name_.end()) return absl::UnauthenticatedError(StrCat("invalid ", kind_));
  return it->second;
}

bool ApiKeys::HasName(std::string_view name) const {
  for (const auto& [hash, key_name] : hash_to_name_) {
    if (key_name == name) return true;
  }
  return false;
}

}  // namespace exa::gateway
