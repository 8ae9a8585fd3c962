// Label rules: what `exaserve-cli replica label` stores and both the node agent and the scheduler
// apply. A selector matches model, replica id, version (the label, else the model version) and
// labels; rules apply in order, each against the labels as they stand; a rule given again for the
// same selector merges, later settings winning.
#include "cluster/label_rule.h"

#include <catch2/catch.hpp>

namespace exa::cluster {
namespace {

TEST_CASE("label rule: selectors match model, replica, version and labels", "[cluster][labels]") {
  const Labels labels = {{"track", "stable"}};
  CHECK(SelectorMatches({}, "r1", "m", "v1", labels));
  CHECK(SelectorMatches({{"model", "m"}}, "r1", "m", "v1", labels));
  CHECK_FALSE(SelectorMatches({{"model", "other"}}, "r1", "m", "v1", labels));
  CHECK(SelectorMatches({{"replica", "r1"}}, "r1", "m", "v1", labels));
  CHECK_FALSE(SelectorMatches({{"replica", "r2"}}, "r1", "m", "v1", labels));
  // Without a version label the model version counts; with one, the label does.
  CHECK(SelectorMatches({{"version", "v1"}}, "r1", "m", "v1", labels));
  CHECK_FALSE(SelectorMatches({{"version", "v1"}}, "r1", "m", "v1", {{"version", "v2"}}));
  CHECK(SelectorMatches({{"version", "v2"}}, "r1", "m", "v1", {{"version", "v2"}}));
  CHECK(SelectorMatches({{"model", "m"}, {"track", "stable"}}, "r1", "m", "v1", labels));
  CHECK_FALSE(SelectorMatches({{"model", "m"}, {"track", "canary"}}, "r1", "m", "v1", labels));
  CHECK_FALSE(SelectorMatches({{"zone", "a"}}, "r1", "m", "v1", labels));
}

TEST_CASE("label rule: rules apply in order, each on the labels as they stand",
          "[cluster][labels]") {
  const std::vector<LabelRule> rules = {
      {{{"model", "m"}}, {{"version", "v2"}, {"track", "canary"}}, {}},
      {{{"version", "v2"}}, {{"route", "new"}}, {"track"}},  // matches what the first set
      {{{"model", "other"}}, {{"never", "1"}}, {}},
  };
  const Labels out = ApplyRules(rules, "r1", "m", "v1", {{"exaserve.io/deployment", "tiny"}});
  CHECK(out == Labels{{"exaserve.io/deployment", "tiny"}, {"version", "v2"}, {"route", "new"}});
  // Applying them again changes nothing: what the scheduler compares a replica's labels with.
  CHECK(ApplyRules(rules, "r1", "m", "v1", out) == out);
  CHECK(ApplyRules({}, "r1", "m", "v1", {{"a", "1"}}) == Labels{{"a", "1"}});
}

TEST_CASE("label rule: the same selector again merges, later settings win", "[cluster][labels]") {
  LabelRule stored{{{"model", "m"}}, {{"version", "v2"}, {"track", "canary"}}, {"old"}};
  LabelRule merged = MergeRule(stored, {{{"model", "m"}}, {{"version", "v3"}, {"old", "x"}}, {}});
  CHECK(merged.set == Labels{{"version", "v3"}, {"track", "canary"}, {"old", "x"}});
  CHECK(merged.remove.empty());  // "old" is set again, so no longer removed
  merged = MergeRule(merged, {{{"model", "m"}}, {}, {"track", "track"}});
  CHECK(merged.set == Labels{{"version", "v3"}, {"old", "x"}});
  CHECK(merged.remove == std::vector<std::string>{"track"});
}

TEST_CASE("label rule: the change from one label set to another", "[cluster][labels]") {
  const LabelRule change =
      LabelChange({{"a", "1"}, {"b", "2"}, {"c", "3"}}, {{"a", "1"}, {"b", "9"}, {"d", "4"}});
  CHECK(change.set == Labels{{"b", "9"}, {"d", "4"}});
  CHECK(change.remove == std::vector<std::string>{"c"});
  CHECK(ApplyRule(change, {{"a", "1"}, {"b", "2"}, {"c", "3"}}) ==
        Labels{{"a", "1"}, {"b", "9"}, {"d", "4"}});
  const LabelRule none = LabelChange({{"a", "1"}}, {{"a", "1"}});
  CHECK(none.set.empty());
  CHECK(none.remove.empty());
}

TEST_CASE("label rule: keys and values are bounded, system keys reserved", "[cluster][labels]") {
  CHECK(ValidateChange({{"version", "v2"}}, {"track"}).ok());
  CHECK_FALSE(ValidateChange({{"", "v"}}, {}).ok());
  CHECK_FALSE(ValidateChange({{std::string(65, 'k'), "v"}}, {}).ok());
  absl::Status s = ValidateChange({{"k", std::string(129, 'v')}}, {});
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message().find("\"k\"") != std::string_view::npos);
  // exaserve.io/deployment is what makes a replica the scheduler's: neither set nor removed.
  CHECK(absl::IsInvalidArgument(ValidateChange({{"exaserve.io/deployment", "x"}}, {})));
  // Keys travel in gossip and metric labels: no spaces, no control characters in values.
  CHECK(absl::IsInvalidArgument(ValidateChange({{"a b", "c"}}, {})));
  CHECK(absl::IsInvalidArgument(ValidateLabels({{"k", "line\nbreak"}})));
  CHECK(ValidateLabels({{"exaserve.io/deployment", "tiny@v1"}, {"version", "v2"}}).ok());
  s = ValidateChange({}, {"exaserve.io/deployment"});
  CHECK(s.message().find("reserved") != std::string_view::npos);
}

}  // namespace
}  // namespace exa::cluster
