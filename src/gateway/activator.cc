#include "gateway/activator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/strings.h"

namespace exa::gateway {
namespace {

constexpr absl::Duration kDemandMemory = absl::Seconds(5);

std::string ModelOf(std::string_view requested) {
  return std::string(requested.substr(0, requested.find('@')));
}

}  // namespace

Activator::Activator(ActivatorOptions options, metrics::Registry& registry)
    : options_(options),
      waiting_(registry.SimpleGauge(
          "exaserve_gateway_activation_waiting",
          "Requests held for a model with no ready replica while one starts (scale from zero; "
          "docs/architecture.md#autoscaling).")),
      outcomes_(registry.AddCounter(
          "exaserve_gateway_activations_total",
          "Requests held for a model scaled to zero, by outcome: served, timeout (none ready "
          "within gateway.activation_timeout), full (gateway.activation_queue reached), gone "
          "(the client left), refused (a call that raced the removal of the last replica, told to "
          "retry).",
          {"outcome"})) {}

void Activator::SetActivatable(std::set<std::string> models) {
  absl::MutexLock lock(&mu_);
  if (models == activatable_) return;
  EXA_LOG_INFO("gateway", "models that may scale from zero",
               {{"models", absl::StrJoin(models, ",")}});
  activatable_ = std::move(models);
}

bool Activator::Activatable(std::string_view requested) const {
  absl::MutexLock lock(&mu_);
  return activatable_.count(ModelOf(requested)) > 0;
}

void Activator::Demand(const std::string& model, absl::Time now) {
  auto [it, inserted] = asked_.try_emplace(model, now);
  if (inserted || now - it->second > kDemandMemory) new_demand_ = true;
  it->second = now;
}

absl::Status Activator::Park(std::string_view requested, absl::Time now, Parked parked) {
  const std::string model = ModelOf(requested);
  absl::MutexLock lock(&mu_);
  Demand(model, now);
  if (static_cast<int>(parked_.size()) >= options_.max_waiting) {
    outcomes_.WithLabels({"full"}).Increment();
    return absl::UnavailableError(
        StrCat("model ", model, " has no ready replica and ", options_.max_waiting,
               " requests already wait for one (gateway.activation_queue); retry later"));
  }
  parked_.push_back({model, now + options_.timeout, std::move(parked)});
  waiting_.Set(static_cast<double>(parked_.size()));
  return absl::OkStatus();
}

void Activator::NoteDemand(std::string_view requested, absl::Time now) {
  absl::MutexLock lock(&mu_);
  Demand(ModelOf(requested), now);
  outcomes_.WithLabels({"refused"}).Increment();
}

void Activator::Tick(absl::Time now, const std::function<bool(const std::string&)>& served) {
  std::vector<Entry> resume, refuse;
  {
    absl::MutexLock lock(&mu_);
    std::erase_if(asked_, [&](const auto& kv) { return now - kv.second > kDemandMemory; });
    if (parked_.empty()) return;
    std::map<std::string, bool> ready;  // asked once per model and tick
    std::vector<Entry> keep;
    for (Entry& e : parked_) {
      auto [it, inserted] = ready.try_emplace(e.model, false);
      if (inserted) it->second = served(e.model);
      if (e.parked.gone && e.parked.gone()) {
        outcomes_.WithLabels({"gone"}).Increment();
      } else if (it->second) {
        outcomes_.WithLabels({"served"}).Increment();
        resume.push_back(std::move(e));
      } else if (now >= e.deadline) {
        outcomes_.WithLabels({"timeout"}).Increment();
        refuse.push_back(std::move(e));
      } else {
        Demand(e.model, now);
        keep.push_back(std::move(e));
      }
    }
    parked_ = std::move(keep);
    waiting_.Set(static_cast<double>(parked_.size()));
  }
  for (Entry& e : resume) e.parked.resume();
  for (Entry& e : refuse) {
    e.parked.refuse(absl::UnavailableError(StrCat(
        "model ", e.model, " has no ready replica after ", absl::FormatDuration(options_.timeout),
        " (scaled to zero and still starting; gateway.activation_timeout); retry later")));
  }
}

std::vector<std::string> Activator::Waiting(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> models;
  for (const auto& [model, at] : asked_) {
    if (now - at <= kDemandMemory) models.push_back(model);
  }
  return models;
}

bool Activator::TakeNewDemand() {
  absl::MutexLock lock(&mu_);
  return std::exchange(new_demand_, false);
}

int Activator::retry_after_s() const {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Seconds(options_.timeout) / 4, 1, 30));
}

}  // namespace exa::gateway
