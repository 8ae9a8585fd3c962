#include "scheduler/store_keys.h"

#include "absl/strings/numbers.h"

#include "common/logging.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::scheduler {
namespace {
using nlohmann::json;

bool HasPrefix(std::string_view key, std::string_view prefix) {
  return key.size() >= prefix.size() && key.substr(0, prefix.size()) == prefix;
}
}  // namespace

bool IsStoreKey(std::string_view key) {
  for (std::string_view prefix : {kSpecPrefix, kNodePrefix, kRolloutPrefix, kRolloutCommandPrefix,
                                  kRoutePrefix, kLabelRulePrefix, kAutoscalePrefix}) {
    if (key.size() > prefix.size() && HasPrefix(key, prefix)) return true;
  }
  return false;
}

std::map<std::string, NodeOps> NodeOpsIn(const StoreRecords& records) {
  std::map<std::string, NodeOps> out;
  for (auto it = records.lower_bound(std::string(kNodePrefix));
       it != records.end() && HasPrefix(it->first, kNodePrefix); ++it) {
    json j = json::parse(it->second.value, nullptr, false);
    if (!j.is_object()) continue;
    NodeOps ops;
    ops.cordoned = j.value("cordoned", false);
    ops.draining = j.value("draining", false);
    if (j.contains("taints") && j["taints"].is_array()) {
      for (const auto& t : j["taints"]) {
        if (t.is_string()) ops.taints.push_back(t.get<std::string>());
      }
    }
    out[it->first.substr(kNodePrefix.size())] = std::move(ops);
  }
  return out;
}

std::string NodeOpsToJson(const NodeOps& ops) {
  return json{{"cordoned", ops.cordoned}, {"draining", ops.draining}, {"taints", ops.taints}}
      .dump();
}

std::string LabelRuleToJson(const cluster::LabelRule& rule) {
  return json{{"selector", rule.selector}, {"set", rule.set}, {"remove", rule.remove}}.dump();
}

std::optional<cluster::LabelRule> LabelRuleFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    cluster::LabelRule rule;
    rule.selector = j.value("selector", cluster::Labels{});
    rule.set = j.value("set", cluster::Labels{});
    rule.remove = j.value("remove", std::vector<std::string>{});
    return rule;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::vector<cluster::LabelRule> LabelRulesIn(
    const StoreRecords& records,
    const std::optional<std::pair<std::string, cluster::LabelRule>>& pending) {
  std::map<std::string, cluster::LabelRule> by_key;  // ordered by selector
  for (auto it = records.lower_bound(std::string(kLabelRulePrefix));
       it != records.end() && HasPrefix(it->first, kLabelRulePrefix); ++it) {
    std::optional<cluster::LabelRule> rule = LabelRuleFromJson(it->second.value);
    if (rule) by_key.emplace(it->first, std::move(*rule));
  }
  if (pending) by_key.insert_or_assign(pending->first, pending->second);
  std::vector<cluster::LabelRule> out;
  out.reserve(by_key.size());
  for (auto& [key, rule] : by_key) out.push_back(std::move(rule));
  return out;
}

RolloutState RolloutStateIn(const StoreRecords& records, const std::string& name) {
  auto it = records.find(StrCat(kRolloutPrefix, name));
  if (it == records.end()) return RolloutState{};
  absl::StatusOr<RolloutState> s = RolloutStateFromJson(it->second.value);
  if (!s.ok()) {
    EXA_LOG_ERROR("scheduler", "rollout state unreadable; starting afresh",
                  {{"deployment", name}, {"error", std::string(s.status().message())}});
    return RolloutState{};
  }
  return *s;
}

std::string AutoscaleStateToJson(const AutoscaleState& state) {
  return json{
      {"desired", state.desired}, {"at_unix_ms", state.at_unix_ms}, {"reason", state.reason}}
      .dump();
}

std::optional<absl::Time> ActivationIn(const StoreRecords& records, std::string_view model) {
  auto it = records.find(StrCat(kActivationPrefix, model));
  int64_t ms = 0;
  if (it == records.end() || !absl::SimpleAtoi(it->second.value, &ms)) return std::nullopt;
  return absl::FromUnixMillis(ms);
}

std::vector<std::string> StaleActivations(const StoreRecords& records,
                                          const std::set<std::string>& activatable, absl::Time now,
                                          size_t most) {
  std::vector<std::string> stale;
  for (auto it = records.lower_bound(std::string(kActivationPrefix));
       it != records.end() && it->first.starts_with(kActivationPrefix) && stale.size() < most;
       ++it) {
    const std::string model = it->first.substr(kActivationPrefix.size());
    if (activatable.count(model) != 0) continue;
    const std::optional<absl::Time> last = ActivationIn(records, model);
    if (!last || now - *last >= kActivationFresh) stale.push_back(it->first);
  }
  return stale;
}

std::string_view ModelOfRequest(std::string_view requested) {
  return requested.substr(0, requested.find('@'));
}

std::optional<AutoscaleState> AutoscaleStateIn(const StoreRecords& records,
                                               const std::string& name) {
  auto it = records.find(StrCat(kAutoscalePrefix, name));
  if (it == records.end()) return std::nullopt;
  json j = json::parse(it->second.value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("desired") || !j["desired"].is_number_integer() ||
      j["desired"].get<int64_t>() < 0 || j["desired"].get<int64_t>() > kMaxReplicas) {
    EXA_LOG_ERROR("scheduler", "autoscale state unreadable; starting from spec.replicas",
                  {{"deployment", name}});
    return std::nullopt;
  }
  AutoscaleState s;
  s.desired = j["desired"].get<int>();
  if (j.contains("at_unix_ms") && j["at_unix_ms"].is_number_integer()) {
    s.at_unix_ms = j["at_unix_ms"].get<int64_t>();
  }
  if (j.contains("reason") && j["reason"].is_string()) s.reason = j["reason"].get<std::string>();
  return s;
}

std::string RolloutCommandToJson(const StoredRolloutCommand& command) {
  return json{{"id", command.id}, {"command", RolloutCommandName(command.command)}}.dump();
}

std::optional<StoredRolloutCommand> RolloutCommandIn(const StoreRecords& records,
                                                     const std::string& name) {
  auto it = records.find(StrCat(kRolloutCommandPrefix, name));
  if (it == records.end()) return std::nullopt;
  json j = json::parse(it->second.value, nullptr, false);
  if (!j.is_object() || !j.contains("command") || !j["command"].is_string()) return std::nullopt;
  absl::StatusOr<RolloutCommand> command = ParseRolloutCommand(j["command"].get<std::string>());
  if (!command.ok()) return std::nullopt;
  return StoredRolloutCommand{j.value("id", uint64_t{0}), *command};
}

size_t CountPrefix(const StoreRecords& records, std::string_view prefix) {
  size_t n = 0;
  for (auto it = records.lower_bound(std::string(prefix));
       it != records.end() && HasPrefix(it->first, prefix); ++it) {
    ++n;
  }
  return n;
}

}  // namespace exa::scheduler
