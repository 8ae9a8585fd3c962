// Replica label rules (version routing, docs/architecture.md#routing): "set these labels on the
// replicas this selector matches". `exaserve-cli replica label` applies one to the live replicas of
// every node and, with a scheduler in the cluster, stores it in the spec store
// (docs/architecture.md#consistency: version labels are desired state), so a replica the scheduler
// starts later — a rebuild, a scale-up — carries it too. One definition of matching for the node
// agent and the scheduler.
//
// Pure; thread-compatible.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace exa::cluster {

using Labels = std::map<std::string, std::string>;

struct LabelRule {
  // Every key must match: "model" the served model, "replica" the replica id, "version" the
  // replica's version label or, without one, its model version; other keys its labels.
  Labels selector;
  Labels set;
  std::vector<std::string> remove;
};

inline constexpr size_t kMaxLabelsPerReplica = 32;

// Whether `selector` matches a replica serving `model` at `version` with `labels`.
bool SelectorMatches(const Labels& selector, std::string_view replica_id, std::string_view model,
                     std::string_view version, const Labels& labels);

// `labels` with the rule's labels set, then its removals.
Labels ApplyRule(const LabelRule& rule, Labels labels);

// `labels` after every rule of `rules`, in order, that matches the replica as it stands by then
// (one pass: a rule can match labels an earlier one set).
Labels ApplyRules(const std::vector<LabelRule>& rules, std::string_view replica_id,
                  std::string_view model, std::string_view version, Labels labels);

// What turns `current` into `want`: the labels to set (new or changed) and the keys to remove.
LabelRule LabelChange(const Labels& current, const Labels& want);

// Keys under this prefix belong to the system (exaserve.io/deployment makes a replica the
// scheduler's): no rule sets or removes them.
inline constexpr std::string_view kReservedLabelPrefix = "exaserve.io/";

// INVALID_ARGUMENT naming the key unless every key is 1-64 of [A-Za-z0-9._/-] and every value at
// most 128 printable characters: labels travel in gossip, metric labels and logs.
absl::Status ValidateLabels(const Labels& labels);

// ValidateLabels on the labels to set, and INVALID_ARGUMENT when a key to set or remove is
// reserved.
absl::Status ValidateChange(const Labels& set, const std::vector<std::string>& remove);

// The stored rule for a selector after another `replica label` with it: later settings win, a
// key set again is no longer removed and a key removed is no longer set.
LabelRule MergeRule(LabelRule stored, const LabelRule& update);

}  // namespace exa::cluster
