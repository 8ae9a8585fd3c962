// Scheduler.Replicate refuses records the spec store would choke on: a peer's bytes are checked
// before they are stored (they once went in as sent: a non-UTF-8 spec broke GetSpecs for every
// client, and a far-future version pinned the store's clock so that no delete ever won).
#include <catch2/catch.hpp>

#include "scheduler/scheduler_service.h"

namespace exa::scheduler {
namespace {

namespace pb = exaserve::v1;

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

pb::ReplicateRequest Put(const std::string& key, const std::string& value, absl::Time at = kNow) {
  pb::ReplicateRequest m;
  m.set_from("peer");
  m.set_type(pb::ReplicateRequest::PUT);
  pb::StoreRecordProto* r = m.add_records();
  r->set_key(key);
  r->set_value(value);
  r->mutable_version()->set_wall_us(absl::ToUnixMicros(at));
  r->mutable_version()->set_logical(1);
  r->mutable_version()->set_writer("peer");
  return m;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("Replicated records are checked before they are stored") {
  const std::string spec =
      "apiVersion: exaserve.io/v1\nkind: InferenceReplica\nmetadata: {name: m}\n"
      "spec:\n  model: llama-13b\n  replicas: 2\n";
  CHECK(ValidateReplicated(Put("spec/m", spec), kNow).ok());
  CHECK(ValidateReplicated(Put("route/x-v", R"({"label":"version","default":"v1"})"), kNow).ok());

  CHECK_THAT(Message(ValidateReplicated(Put("spec/evil", "\xff\x00not yaml{{"), kNow)),
             Catch::Contains("records: key \"spec/evil\": the value is not UTF-8"));
  CHECK_THAT(Message(ValidateReplicated(Put("spec/bad", "kind: [1"), kNow)),
             Catch::StartsWith("records: spec/bad"));
  CHECK(Message(ValidateReplicated(Put("route/x-evil", "[1,2"), kNow)) ==
        "records: key \"route/x-evil\": the value is not a JSON object");
  CHECK(Message(ValidateReplicated(Put("secrets/x", "{}"), kNow)) ==
        "records: key \"secrets/x\": not a kind of record the spec store keeps");
  CHECK_THAT(Message(ValidateReplicated(Put("route/x", "{}", kNow + absl::Hours(2)), kNow)),
             Catch::Contains("ahead of this scheduler's clock"));
  // A tombstone carries no value to parse, but its version is checked too.
  pb::ReplicateRequest tombstone = Put("route/x", "");
  tombstone.mutable_records(0)->set_deleted(true);
  CHECK(ValidateReplicated(tombstone, kNow).ok());
  tombstone.mutable_records(0)->mutable_version()->set_wall_us(INT64_MAX);
  CHECK_FALSE(ValidateReplicated(tombstone, kNow).ok());
}

}  // namespace
}  // namespace exa::scheduler
