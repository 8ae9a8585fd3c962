#include "cluster/label_rule.h"

#include <algorithm>

#include "common/chars.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::cluster {

bool SelectorMatches(const Labels& selector, std::string_view replica_id, std::string_view model,
                     std::string_view version, const Labels& labels) {
  for (const auto& [k, v] : selector) {
    if (k == "model") {
      if (model != v) return false;
    } else if (k == "replica") {
      if (replica_id != v) return false;
    } else if (k == "version" && labels.count("version") == 0) {
      if (version != v) return false;
    } else {
      auto it = labels.find(k);
      if (it == labels.end() || it->second != v) return false;
    }
  }
  return true;
}

Labels ApplyRule(const LabelRule& rule, Labels labels) {
  for (const auto& [k, v] : rule.set) labels[k] = v;
  for (const std::string& k : rule.remove) labels.erase(k);
  return labels;
}

Labels ApplyRules(const std::vector<LabelRule>& rules, std::string_view replica_id,
                  std::string_view model, std::string_view version, Labels labels) {
  for (const LabelRule& rule : rules) {
    if (SelectorMatches(rule.selector, replica_id, model, version, labels)) {
      labels = ApplyRule(rule, std::move(labels));
    }
  }
  return labels;
}

LabelRule LabelChange(const Labels& current, const Labels& want) {
  LabelRule change;
  for (const auto& [k, v] : want) {
    auto it = current.find(k);
    if (it == current.end() || it->second != v) change.set[k] = v;
  }
  for (const auto& [k, v] : current) {
    if (want.count(k) == 0) change.remove.push_back(k);
  }
  return change;
}

absl::Status ValidateLabels(const Labels& labels) {
  constexpr size_t kMaxKey = 64, kMaxValue = 128;
  for (const auto& [k, v] : labels) {
    if (k.empty() || k.size() > kMaxKey || !OnlyAlnumOr(k, "._/-") || v.size() > kMaxValue ||
        HasAsciiControl(v)) {
      return absl::InvalidArgumentError(
          StrCat("labels: \"", k, "\": keys are 1 to ", kMaxKey,
                 " of letters, digits, '.', '_', '/', '-'; values at most ", kMaxValue,
                 " printable characters"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateChange(const Labels& set, const std::vector<std::string>& remove) {
  EXA_RETURN_IF_ERROR(ValidateLabels(set));
  for (const std::string& k : remove) EXA_RETURN_IF_ERROR(ValidateLabels({{k, ""}}));
  std::vector<std::string> touched = remove;
  for (const auto& [k, v] : set) touched.push_back(k);
  for (const std::string& k : touched) {
    if (k.rfind(kReservedLabelPrefix, 0) == 0) {
      return absl::InvalidArgumentError(StrCat("labels: \"", k, "\": keys under ",
                                               kReservedLabelPrefix,
                                               " are reserved for the scheduler"));
    }
  }
  return absl::OkStatus();
}

LabelRule MergeRule(LabelRule stored, const LabelRule& update) {
  for (const auto& [k, v] : update.set) {
    stored.set[k] = v;
    std::erase(stored.remove, k);
  }
  for (const std::string& k : update.remove) {
    stored.set.erase(k);
    if (std::find(stored.remove.begin(), stored.remove.end(), k) == stored.remove.end()) {
      stored.remove.push_back(k);
    }
  }
  return stored;
}

}  // namespace exa::cluster
