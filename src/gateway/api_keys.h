// API keys for the public API: a file of SHA-256 hashes (hex, one per line, optionally
// "name:hash"; '#' comments), so the file never holds a usable secret. Clients send
// `Authorization: Bearer <key>` (HTTP header or gRPC metadata). /healthz, /readyz and /metrics
// stay open.
//
// Thread safety: immutable after Load; Check may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace exa::gateway {

class ApiKeys {
 public:
  // `kind` names the secret in errors: "API key" (the public API) or "admin token".
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path,
                                                       std::string kind = "API key");
  // One key, held as its hash under `name` (a token the process made itself).
  static std::unique_ptr<ApiKeys> FromToken(std::string name, std::string_view token,
                                            std::string kind);

  // OK with the key's name; UNAUTHENTICATED (with the reason) for a missing or unknown key.
  absl::StatusOr<std::string> Check(std::string_view authorization_header) const;
  size_t size() const { return hash_to_name_.size(); }
  // Whether a key is named `name` (linear: for checking configuration, not requests).
  bool HasName(std::string_view name) const;

  static std::string Sha256Hex(std::string_view data);
  // A new random key ("exa-" + 40 hex chars) for `exaserve-cli apikey new`.
  static std::string NewKey();

 private:
  absl::flat_hash_map<std::string, std::string> hash_to_name_;
  std::string kind_;
};

}  // namespace exa::gateway
