#include "consensus/kv_state.h"

#include <catch2/catch.hpp>

namespace exa::consensus {
namespace {

KvResult Run(KvState& kv, uint64_t index, KvCommand command) {
  absl::StatusOr<KvResult> r = DecodeKvResult(kv.Apply(index, EncodeKvCommand(command)));
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("writes stamp the record with their index; a stale expected version is refused") {
  KvState kv;
  CHECK(Run(kv, 5, {"a", {{"spec/x", "one", 0}}}).ok);  // 0: must not exist
  REQUIRE(kv.Get("spec/x") != nullptr);
  CHECK(kv.Get("spec/x")->version == 5);

  KvResult stale = Run(kv, 6, {"b", {{"spec/x", "two", 4}}});
  CHECK_FALSE(stale.ok);
  CHECK(stale.conflict_key == "spec/x");
  CHECK(stale.expected_version == 4);
  CHECK(stale.actual_version == 5);
  CHECK(stale.error.find("version 5") != std::string::npos);
  CHECK(kv.Get("spec/x")->value == "one");

  CHECK(Run(kv, 7, {"c", {{"spec/x", "two", 5}}}).ok);
  CHECK(kv.Get("spec/x")->version == 7);
  CHECK_FALSE(Run(kv, 8, {"d", {{"spec/x", "three", 0}}}).ok);  // exists already
}

TEST_CASE("a transaction applies every op or none") {
  KvState kv;
  CHECK(Run(kv, 1, {"a", {{"k1", "v", std::nullopt}}}).ok);
  KvResult r = Run(kv, 2, {"b", {{"k2", "v", std::nullopt}, {"k1", std::nullopt, 9}}});
  CHECK_FALSE(r.ok);
  CHECK(kv.Get("k2") == nullptr);
  CHECK(Run(kv, 3, {"c", {{"k2", "v", std::nullopt}, {"k1", std::nullopt, 1}}}).ok);
  CHECK(kv.Get("k1") == nullptr);
  CHECK(kv.Get("k2")->version == 3);
}

TEST_CASE("a retried request id gets the first answer and applies once") {
  KvState kv;
  KvResult first = Run(kv, 1, {"same", {{"k", "v1", 0}}});
  CHECK(first.ok);
  KvResult again = Run(kv, 2, {"same", {{"k", "v1", 0}}});
  CHECK(again.ok);
  CHECK(again.index == 1);
  CHECK(kv.Get("k")->version == 1);
}

TEST_CASE("limits are enforced at apply, the same on every node") {
  KvLimits limits;
  limits.max_records = 2;
  KvState kv(limits);
  CHECK(Run(kv, 1, {"a", {{"k1", "v", std::nullopt}, {"k2", "v", std::nullopt}}}).ok);
  KvResult full = Run(kv, 2, {"b", {{"k3", "v", std::nullopt}}});
  CHECK_FALSE(full.ok);
  CHECK(full.error.find("at most 2") != std::string::npos);
  CHECK(DecodeKvResult(kv.Apply(3, "garbage")).value().error.find("kv command") !=
        std::string::npos);
}

TEST_CASE("a snapshot restores records, versions and answered ids") {
  KvState kv;
  Run(kv, 1, {"a", {{"k1", "v1", std::nullopt}}});
  Run(kv, 2, {"b", {{"k2", "v2", std::nullopt}}});
  KvState copy;
  REQUIRE(copy.Restore(kv.Snapshot()).ok());
  CHECK(copy.records() == kv.records());
  CHECK(copy.applied_index() == 2);
  CHECK(Run(copy, 3, {"a", {{"k1", "other", std::nullopt}}}).index == 1);  // answered before
  CHECK_FALSE(copy.Restore("\x01garbage").ok());
  CHECK(copy.records().size() == 2);  // a bad snapshot changes nothing
}

}  // namespace
}  // namespace exa::consensus
