#include "engine/prefix_hash.h"

#include <openssl/evp.h>

#include <cstring>

#include "common/check.h"

namespace exa::engine {
namespace {

BlockHash FromDigest(const unsigned char* d) {
  return BlockHash::FromBytes(reinterpret_cast<const char*>(d));
}

void PutU64(uint64_t v, unsigned char* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(v & 0xff);
    v >>= 8;
  }
}

}  // namespace

struct PrefixHasher::Context {
  EVP_MD_CTX* md = nullptr;
  // Fetched once: EVP_sha256() makes every EVP_DigestInit_ex fetch the implementation again,
  // which tripled the cost of hashing a block.
  EVP_MD* sha256 = nullptr;
  std::vector<unsigned char> bytes;  // reused serialisation buffer
};

PrefixHasher::PrefixHasher() : ctx_(std::make_unique<Context>()) {
  ctx_->md = EVP_MD_CTX_new();
  EXA_CHECK(ctx_->md != nullptr) << "EVP_MD_CTX_new failed (out of memory)";
  ctx_->sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EXA_CHECK(ctx_->sha256 != nullptr) << "OpenSSL has no SHA256 implementation";
}

PrefixHasher::~PrefixHasher() {
  EVP_MD_free(ctx_->sha256);
  EVP_MD_CTX_free(ctx_->md);
}

BlockHash PrefixHasher::Root(std::string_view cache_namespace, std::string_view salt) {
  // Length-prefixed fields, so ("ab", "c") and ("a", "bc") name different roots.
  std::vector<unsigned char>& b = ctx_->bytes;
  b.assign(16, 0);
  PutU64(cache_namespace.size(), b.data());
  PutU64(salt.size(), b.data() + 8);
  b.insert(b.end(), cache_namespace.begin(), cache_namespace.end());
  b.insert(b.end(), salt.begin(), salt.end());
  static constexpr std::string_view kDomain = "exaserve-prefix-root-v1";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXA_CHECK(EVP_DigestInit_ex2(ctx_->md, ctx_->sha256, nullptr) == 1 &&
            EVP_DigestUpdate(ctx_->md, kDomain.data(), kDomain.size()) == 1 &&
            EVP_DigestUpdate(ctx_->md, b.data(), b.size()) == 1 &&
            EVP_DigestFinal_ex(ctx_->md, digest, &len) == 1)
      << "sha256 failed";
  return FromDigest(digest);
}

BlockHash PrefixHasher::Chain(const BlockHash& parent, std::span<const int32_t> tokens) {
  std::vector<unsigned char>& b = ctx_->bytes;
  b.resize(16 + tokens.size() * 4);
  PutU64(parent.hi, b.data());
  PutU64(parent.lo, b.data() + 8);
  unsigned char* out = b.data() + 16;
  for (int32_t t : tokens) {  // little-endian, whatever the host
    const auto u = static_cast<uint32_t>(t);
    out[0] = static_cast<unsigned char>(u);
    out[1] = static_cast<unsigned char>(u >> 8);
    out[2] = static_cast<unsigned char>(u >> 16);
    out[3] = static_cast<unsigned char>(u >> 24);
    out += 4;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXA_CHECK(EVP_DigestInit_ex2(ctx_->md, ctx_->sha256, nullptr) == 1 &&
            EVP_DigestUpdate(ctx_->md, b.data(), b.size()) == 1 &&
            EVP_DigestFinal_ex(ctx_->md, digest, &len) == 1)
      << "sha256 failed";
  return FromDigest(digest);
}

void PrefixHasher::Extend(const BlockHash& root, std::span<const int32_t> tokens,
                          int32_t block_size, int32_t full_blocks, std::vector<BlockHash>* hashes) {
  EXA_CHECK(int64_t{full_blocks} * block_size <= static_cast<int64_t>(tokens.size()))
      << full_blocks << " blocks of " << block_size << " from " << tokens.size() << " tokens";
  for (auto i = static_cast<int32_t>(hashes->size()); i < full_blocks; ++i) {
    const BlockHash& parent = i == 0 ? root : (*hashes)[static_cast<size_t>(i) - 1];
    hashes->push_back(
        Chain(parent, tokens.subspan(static_cast<size_t>(i) * block_size, block_size)));
  }
}

}  // namespace exa::engine
