// Gossip encryption keys (memberlist's keyring): AES-256-GCM with one primary key used to seal
// and any number of secondaries also tried to open, so keys rotate without downtime —
// install the new key everywhere, make it primary everywhere, then remove the old one.
// The cluster name is additional authenticated data: packets from another cluster never open.
//
// Sealed packet: 0x01 nonce[12] ciphertext tag[16].
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace exa::membership {

inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kSealOverheadBytes = 1 + 12 + 16;

class Keyring {
 public:
  // An empty keyring: plain text (the daemon warns at start).
  explicit Keyring(std::string cluster_name) : aad_(std::move(cluster_name)) {}

  bool enabled() const;
  // Adds a key (32 raw bytes). The first key installed becomes primary.
  absl::Status Install(std::string key);
  absl::Status Use(std::string_view key);     // make an installed key primary
  absl::Status Remove(std::string_view key);  // the primary cannot be removed
  std::vector<std::string> Keys() const;      // primary first

  // Plain bytes when disabled.
  std::string Seal(std::string_view plain) const;
  // Tries every key; fails on a packet no key opens.
  absl::StatusOr<std::string> Open(std::string_view sealed) const;

  // A fresh random key, base64-encoded (what `exaserve-cli gossip keygen` prints).
  static std::string GenerateBase64();
  static absl::StatusOr<std::string> DecodeBase64Key(std::string_view text);
  static std::string EncodeBase64(std::string_view raw);
  // A key file holds one base64 key per line, the primary first.
  static absl::StatusOr<std::vector<std::string>> ReadKeyFile(const std::string& path);

 private:
  const std::string aad_;
  mutable absl::Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);  // primary first
};

}  // namespace exa::membership
