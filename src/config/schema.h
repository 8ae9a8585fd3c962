// Typed configuration from defaults, a YAML file, the environment and flags
// (docs/architecture.md#module-map).
//
// Each module owns a plain options struct and registers its fields here under a dotted key path
// ("http.max_body_bytes"). Sources are applied in increasing precedence — struct defaults, then
// the YAML file, then `EXASERVE_<SECTION>_<KEY>` environment variables, then flags — each one
// overwriting what came before. Unknown keys are refused with the nearest valid key suggested;
// every error names the source (file:line:column, variable or flag), the key path and the value.
//
// Thread safety: none; a Schema is built, loaded and printed on one thread at start-up. It holds
// pointers into the options structs, which must outlive it.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace YAML {
class Node;
}

namespace exa::config {

// A byte quantity written like "53Gi" or "1.5G" (common/units.h).
struct Bytes {
  uint64_t value = 0;
  friend bool operator==(const Bytes&, const Bytes&) = default;
};

// Checks a parsed value; returns an error message (without the key) or empty when valid.
template <typename T>
using Validator = std::function<std::string(const T&)>;

// Validators for limits that stop a node working at 0 (every request refused, every RPC too big).
std::string PositiveBytes(const Bytes& v);
std::string PositiveDuration(const absl::Duration& v);
// Bytes in [lo, hi] (a limit a library keeps in fewer bits than 64).
Validator<Bytes> BytesBetween(uint64_t lo, uint64_t hi);

// What a yaml-cpp parse error says, in words a user can act on: yaml-cpp reports input nested
// past its depth limit as "bad file"; this names the nesting instead.
std::string YamlParseError(const std::exception& e);

class Schema {
 public:
  Schema();
  ~Schema();
  Schema(const Schema&) = delete;
  Schema& operator=(const Schema&) = delete;

  // Registers a field. `path` is "section.key" (lowercase, snake_case); `help` is one line shown
  // by --print-config. Supported T: std::string, bool, int, int64_t, uint16_t, uint32_t,
  // double, Bytes, absl::Duration, std::vector<std::string>.
  template <typename T>
  void Add(std::string path, T* field, std::string help, Validator<T> validator = {});

  // Registers a string field whose value must be one of `allowed`.
  void AddEnum(std::string path, std::string* field, std::vector<std::string> allowed,
               std::string help);

  absl::Status LoadYamlFile(const std::string& path);
  absl::Status LoadYamlString(std::string_view text, std::string_view source_name);
  // Applies every EXASERVE_* variable of `envp` (a NULL-terminated "K=V" array like environ).
  absl::Status LoadEnvironment(const char* const* envp);
  // Sets one key from its string form; `source` names where it came from ("flag --http-port").
  absl::Status Set(std::string_view path, std::string_view value, std::string_view source);

  // The effective configuration as commented YAML, in registration order.
  std::string ToYaml() const;

  bool Has(std::string_view path) const;
  // The env variable that sets `path`: "http.max_body_bytes" -> "EXASERVE_HTTP_MAX_BODY_BYTES".
  static std::string EnvName(std::string_view path);

  struct Field;

 private:
  void AddField(std::unique_ptr<Field> field);
  const Field* Find(std::string_view path) const;
  std::string Suggest(std::string_view path) const;
  absl::Status WalkYaml(const YAML::Node& node, const std::string& prefix, std::string_view source);

  std::vector<std::unique_ptr<Field>> fields_;
};

// Levenshtein distance, used for "did you mean" suggestions.
size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace exa::config
