// ReplicaHost's pre-staging (Node.StageModel, docs/architecture.md#weights): models pulled into
// the node cache ahead of a replica start, through the daemon's weights fetcher. The lifecycle
// that loads them is in replica_host.cc.
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/strings.h"
#include "node/replica_host.h"
#include "node/store_name.h"

namespace exa::node {

void ReplicaHost::SetModelFetch(ModelFetch fetch) {
  absl::MutexLock lock(&mu_);
  fetch_ = std::move(fetch);
}

bool ReplicaHost::pulls_models() const {
  absl::MutexLock lock(&mu_);
  return static_cast<bool>(fetch_);
}

absl::StatusOr<std::pair<std::string, std::string>> ReplicaHost::StageModel(
    const std::string& model, const std::string& version) {
  if (!StoreNameOk(model)) {
    return absl::InvalidArgumentError(
        StrCat("model: \"", model,
               "\": a model name (1-128 characters, no '/', spaces or control characters)"));
  }
  if (!StoreNameOk(version)) {
    return absl::InvalidArgumentError(
        StrCat("version: \"", version,
               "\": a version (1-128 characters, no '/', spaces or control characters)"));
  }
  const std::string key = StrCat(model, "@", version);
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the node is stopping");
  if (!fetch_) return absl::FailedPreconditionError("this node has no weights fetcher");
  auto it = staging_.find(key);
  if (it != staging_.end() &&
      (it->second.state != "failed" || absl::Now() - it->second.failed_at < stage_retry_after_)) {
    return std::make_pair(it->second.state, it->second.reason);
  }
  if (stage_pulls_ >= kMaxStagePulls) {
    return absl::ResourceExhaustedError(StrCat(stage_pulls_,
                                               " models are being pre-staged already (at most ",
                                               kMaxStagePulls, "); ask again later"));
  }
  if (it == staging_.end() && staging_.size() >= kMaxStagedModels) {
    return absl::ResourceExhaustedError(
        StrCat("this node tracks ", kMaxStagedModels, " staged models already"));
  }
  staging_[key] = Staging{"pulling", StrCat("pulling ", model, ":", version)};
  stage_pulls_++;
  EXA_LOG_INFO("node", "pre-staging a model", {{"model", key}});
  workers_.emplace_back([this, model, version, key, fetch = fetch_] {
    absl::StatusOr<std::string> dir = fetch(model, version);
    absl::MutexLock lock(&mu_);
    stage_pulls_--;
    if (dir.ok()) {
      staging_[key] = Staging{"staged", *dir};
      EXA_LOG_INFO("node", "model pre-staged", {{"model", key}, {"dir", *dir}});
    } else {
      staging_[key] = Staging{"failed", std::string(dir.status().message()), absl::Now()};
      EXA_LOG_WARN("node", "pre-staging failed",
                   {{"model", key}, {"error", std::string(dir.status().message())}});
    }
  });
  return std::make_pair(std::string("pulling"), staging_[key].reason);
}

std::vector<std::string> ReplicaHost::StagedModels() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [key, s] : staging_) {
    if (s.state == "staged") out.push_back(key);
  }
  return out;
}

}  // namespace exa::node
