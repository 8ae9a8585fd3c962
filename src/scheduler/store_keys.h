// The spec store's keys and how the scheduler reads its records (docs/architecture.md#consistency):
//   spec/<name>             an InferenceReplica spec, canonical YAML
//   rollout/<name>          the spec's rollout state (rollout.h), written by the reconciler
//   rollout-command/<name>  the operator's last rollout command, applied by the reconciler
//   node/<id>               a node's operations: cordoned, draining, taints (JSON)
//   route/<header>          a gateway version route (JSON)
//   labelrule/<selector>    a stored `replica label` rule, keyed by its selector as JSON
//   autoscale/<name>        the autoscaler's replica count for the spec (JSON), by the reconciler
//
// Thread safety: pure functions over a snapshot of the committed records.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "cluster/label_rule.h"
#include "scheduler/replicated_store.h"
#include "scheduler/rollout.h"

namespace exa::scheduler {

inline constexpr std::string_view kSpecPrefix = "spec/";
inline constexpr std::string_view kNodePrefix = "node/";
inline constexpr std::string_view kRolloutPrefix = "rollout/";
inline constexpr std::string_view kRolloutCommandPrefix = "rollout-command/";
inline constexpr std::string_view kRoutePrefix = "route/";
inline constexpr std::string_view kLabelRulePrefix = "labelrule/";
inline constexpr std::string_view kAutoscalePrefix = "autoscale/";
// activation/<model>: when a gateway last held requests for the model with no replica to serve
// them (unix ms); an autoscaled deployment of that model at zero replicas starts one.
inline constexpr std::string_view kActivationPrefix = "activation/";
// How long such a record means requests are still waiting.
inline constexpr absl::Duration kActivationFresh = absl::Seconds(15);
// A scheduler stores a gateway's report at most this often per model.
inline constexpr absl::Duration kActivationRefresh = absl::Seconds(5);

// Set on every replica the scheduler starts: only labelled replicas are managed (and stopped when
// their deployment goes away); a node's own replicas are left alone.
inline constexpr std::string_view kDeploymentLabel = "exaserve.io/deployment";

// The committed records as this node applied them, by key.
using StoreRecords = std::map<std::string, StoreRecord>;

// Whether `key` is one of the kinds above (a prefix and a non-empty name).
bool IsStoreKey(std::string_view key);

// The operations an operator set on a node (exaserve-cli node ...).
struct NodeOps {
  bool cordoned = false;
  bool draining = false;
  std::vector<std::string> taints;
};
std::map<std::string, NodeOps> NodeOpsIn(const StoreRecords& records);
std::string NodeOpsToJson(const NodeOps& ops);

std::string LabelRuleToJson(const cluster::LabelRule& rule);
std::optional<cluster::LabelRule> LabelRuleFromJson(const std::string& text);
// The stored label rules, in the order they apply (by selector), with `pending` (store key, rule)
// in place of what is stored under its key (a write not yet acknowledged).
std::vector<cluster::LabelRule> LabelRulesIn(
    const StoreRecords& records,
    const std::optional<std::pair<std::string, cluster::LabelRule>>& pending = std::nullopt);

// The stored rollout state of spec `name`; empty before its first step, or when unreadable (an
// error is logged and the rollout starts afresh).
RolloutState RolloutStateIn(const StoreRecords& records, const std::string& name);

// An operator's rollout command as stored under rollout-command/<name>: the reconciler applies
// each id once (RolloutState::last_command).
struct StoredRolloutCommand {
  uint64_t id = 0;
  RolloutCommand command = RolloutCommand::kPause;
};
std::string RolloutCommandToJson(const StoredRolloutCommand& command);
std::optional<StoredRolloutCommand> RolloutCommandIn(const StoreRecords& records,
                                                     const std::string& name);

// The autoscaler's last decision for a spec (autoscaler.h): the replica count in force, so that
// every scheduler agrees on it and a new leader carries on from it.
struct AutoscaleState {
  int desired = 0;
  int64_t at_unix_ms = 0;
  std::string reason;
};
std::string AutoscaleStateToJson(const AutoscaleState& state);
// Empty when none is stored, or when it is unreadable (logged).
std::optional<AutoscaleState> AutoscaleStateIn(const StoreRecords& records,
                                               const std::string& name);

// When a gateway last held requests for `model` with no replica to serve them
// (kActivationPrefix); empty when never, or unreadable.
std::optional<absl::Time> ActivationIn(const StoreRecords& records, std::string_view model);
// The activation records to delete: those of models not in `activatable` (the spec deleted, or
// no longer autoscaled to zero) once older than kActivationFresh, or unreadable; at most `most`.
std::vector<std::string> StaleActivations(const StoreRecords& records,
                                          const std::set<std::string>& activatable, absl::Time now,
                                          size_t most);
// The model part of a request's "NAME@VERSION" (the name alone is the model).
std::string_view ModelOfRequest(std::string_view requested);

// How many records have keys starting with `prefix`.
size_t CountPrefix(const StoreRecords& records, std::string_view prefix);

}  // namespace exa::scheduler
