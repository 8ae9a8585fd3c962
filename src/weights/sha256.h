// SHA-256 over OpenSSL libcrypto (SHA-NI where the CPU has it): the one digest weights use for
// chunks, files and manifests.
//
// Thread safety: a Sha256 is used by one thread at a time; the free functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace exa::weights {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Lowercase hex of the digest; the object is reset and may be reused.
  std::string FinalHex();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

std::string Sha256Hex(std::string_view data);

// True for 64 lowercase hex digits.
bool IsSha256Hex(std::string_view text);

}  // namespace exa::weights
