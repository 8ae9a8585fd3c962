#include "scheduler/spec_versions.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string_view>

#include "common/strings.h"
#include "scheduler/store_keys.h"

namespace exa::scheduler {
uint64_t ResourceVersion(const StoreRecord* record) {
  return record != nullptr ? static_cast<uint64_t>(record->version.hlc.wall_us) : 0;
}

absl::StatusOr<ResourceVersions> NamedVersions(const exaserve::v1::ApplyRequest& request,
                                               const std::vector<InferenceReplicaSpec>& specs,
                                               ResourceVersions from_yaml) {
  for (const auto& [name, version] : request.resource_versions()) {
    bool held = std::any_of(specs.begin(), specs.end(),
                            [&](const InferenceReplicaSpec& s) { return s.name == name; });
    if (!held) {
      return absl::InvalidArgumentError(
          StrCat("resource_versions names spec \"", name, "\", which the YAML does not hold"));
    }
    auto [it, added] = from_yaml.emplace(name, version);
    if (!added && it->second != version) {
      return absl::InvalidArgumentError(StrCat("spec \"", name, "\": resource version ", version,
                                               " was named, but its metadata.resourceVersion is ",
                                               it->second));
    }
  }
  return from_yaml;
}

std::vector<std::vector<consensus::KvOp>> StoreTransactions(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
    const std::map<std::string, uint64_t>& expected) {
  std::vector<std::vector<consensus::KvOp>> out;
  for (const auto& [key, value] : writes) {
    consensus::KvOp op{key, value, std::nullopt};
    if (auto e = expected.find(key); e != expected.end()) op.expected_version = e->second;
    if (expected.empty() || out.empty()) out.emplace_back();
    out.back().push_back(std::move(op));
  }
  return out;
}

grpc::Status ConflictStatus(const VersionConflict& c) {
  const std::string_view key = c.key;
  const std::string what = key.starts_with(kSpecPrefix)
                               ? StrCat("spec \"", key.substr(kSpecPrefix.size()), "\"")
                               : StrCat("record \"", key, "\"");
  std::string message;
  if (c.expected_version == 0) {
    message = StrCat(what, ": resource version 0 (must not exist) was named, but it exists ",
                     "at version ", c.actual_version);
  } else if (c.actual_version == 0) {
    message = StrCat(what, ": resource version ", c.expected_version,
                     " was named, but it does not exist (deleted since it was read)");
  } else {
    message = StrCat(what, ": resource version ", c.expected_version,
                     " was named, but the store holds version ", c.actual_version,
                     " (changed since it was read); read it again and retry");
  }
  return grpc::Status(grpc::ABORTED, message);
}

grpc::Status WriteFailure(const WriteOutcome& outcome) {
  if (outcome.conflict) return ConflictStatus(*outcome.conflict);
  return grpc::Status(grpc::UNAVAILABLE, outcome.error);
}

}  // namespace exa::scheduler
