// ReplicaHost's replica labels (docs/architecture.md#routing: gateways route by them): set by
// StartReplica and Relabel, matched by selectors, and persisted to the labels file so that they
// survive a restart. Guarded by labels_mu_, apart from the lifecycle's mu_.
#include <filesystem>

#include "cluster/label_rule.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"
#include "node/replica_host.h"

namespace exa::node {

void ReplicaHost::AddLabels(const std::string& id, const Labels& labels) {
  if (labels.empty()) return;
  absl::MutexLock lock(&labels_mu_);
  for (const auto& [k, v] : labels) labels_[id][k] = v;
  labels_version_++;
  if (absl::Status s = SaveLabelsLocked(); !s.ok()) {
    EXA_LOG_ERROR("node", "replica labels not saved (they hold until restart)",
                  {{"replica", id}, {"error", std::string(s.message())}});
  }
}

absl::StatusOr<std::vector<std::pair<std::string, ReplicaHost::Labels>>> ReplicaHost::Relabel(
    const Labels& selector, const Labels& set, const std::vector<std::string>& remove) {
  EXA_RETURN_IF_ERROR(cluster::ValidateChange(set, remove));
  const cluster::LabelRule rule{selector, set, remove};
  const auto live = replicas();
  absl::MutexLock lock(&labels_mu_);
  std::vector<std::pair<std::string, Labels>> matched;
  for (const auto& r : live) {
    const Labels& labels = labels_[r->id];
    if (!cluster::SelectorMatches(selector, r->id, r->model->name, r->model->version, labels)) {
      continue;
    }
    Labels updated = cluster::ApplyRule(rule, labels);
    if (updated.size() > cluster::kMaxLabelsPerReplica) {
      return absl::InvalidArgumentError(
          StrCat("labels: at most ", cluster::kMaxLabelsPerReplica, " per replica"));
    }
    matched.emplace_back(r->id, std::move(updated));
  }
  for (const auto& [id, labels] : matched) labels_[id] = labels;
  labels_version_++;
  if (!matched.empty()) EXA_RETURN_IF_ERROR(SaveLabelsLocked());
  return matched;
}

ReplicaHost::Labels ReplicaHost::LabelsOf(const std::string& replica_id) const {
  absl::MutexLock lock(&labels_mu_);
  auto it = labels_.find(replica_id);
  return it == labels_.end() ? Labels{} : it->second;
}

absl::Status ReplicaHost::UseLabelsFile(std::string path) {
  absl::MutexLock lock(&labels_mu_);
  labels_path_ = std::move(path);
  if (!std::filesystem::exists(labels_path_)) return absl::OkStatus();
  // At most 32 labels a replica, each a short key and value (replica_host.h): 16 MiB is far
  // past any real file.
  constexpr size_t kMaxLabelsFileBytes = size_t{16} << 20;
  EXA_ASSIGN_OR_RETURN(std::string text, ReadFile(labels_path_, kMaxLabelsFileBytes));
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(labels_path_, ": expected a JSON object of replica id → labels"));
  }
  for (const auto& [id, labels] : doc.items()) {
    if (!labels.is_object()) continue;
    Labels& out = labels_[id];
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  return absl::OkStatus();
}

absl::Status ReplicaHost::SaveLabelsLocked() const {
  if (labels_path_.empty()) return absl::OkStatus();
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [id, labels] : labels_) {
    if (!labels.empty()) doc[id] = labels;
  }
  return WriteFileAtomically(labels_path_, doc.dump(2) + "\n");
}

}  // namespace exa::node
