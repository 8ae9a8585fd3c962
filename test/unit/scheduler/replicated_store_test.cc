// The spec store's replication: majority acknowledgement, last writer wins on hybrid logical
// clocks, tombstones, and anti-entropy repair after a cut.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "scheduler/replicated_store.h"

namespace exa::scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

struct Net {
  std::map<std::string, ReplicatedStore> stores;
  std::set<std::string> cut;  // nodes whose messages are lost both ways
  std::map<std::string, std::vector<uint64_t>> acked, failed;

  Net() {
    for (const char* id : {"a", "b", "c"}) stores.emplace(id, ReplicatedStore(id));
    for (auto& [id, s] : stores) s.SetMembers(kT0, {"a", "b", "c"});
    Pump(kT0);
  }
  // Delivers messages until none are left.
  void Pump(absl::Time now) {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& [id, s] : stores) {
        for (uint64_t w : s.TakeAcknowledged()) acked[id].push_back(w);
        for (uint64_t w : s.TakeFailed()) failed[id].push_back(w);
        s.TakePersist();
        for (OutStoreMessage& m : s.TakeMessages()) {
          moved = true;
          if (cut.count(id) || cut.count(m.to)) continue;
          stores.at(m.to).Handle(now, id, m.message);
        }
      }
    }
  }
  void TickAll(absl::Time now) {
    for (auto& [id, s] : stores) s.Tick(now);
    Pump(now);
  }
  std::string Value(const std::string& node, const std::string& key) {
    const StoreRecord* r = stores.at(node).Get(key);
    return r ? r->value : "<none>";
  }
};

TEST_CASE("A write is acknowledged by a majority and reaches every scheduler") {
  Net net;
  auto id = net.stores.at("a").Put(kT0, "spec/llama", "v1");
  REQUIRE(id);
  net.Pump(kT0);
  CHECK(net.acked["a"] == std::vector<uint64_t>{*id});
  for (const char* n : {"a", "b", "c"}) CHECK(net.Value(n, "spec/llama") == "v1");
}

TEST_CASE("Without a majority the write fails, stays local, and anti-entropy spreads it later") {
  Net net;
  net.cut = {"b", "c"};
  auto id = net.stores.at("a").Put(kT0, "k", "v");
  net.Pump(kT0);
  CHECK(net.acked["a"].empty());
  net.TickAll(kT0 + absl::Seconds(6));  // past the write timeout
  CHECK(net.failed["a"] == std::vector<uint64_t>{*id});
  CHECK(net.Value("b", "k") == "<none>");
  net.cut.clear();
  net.TickAll(kT0 + absl::Seconds(20));  // the periodic digest
  for (const char* n : {"a", "b", "c"}) CHECK(net.Value(n, "k") == "v");
}

TEST_CASE("One of two majorities: a write with one peer cut is still acknowledged") {
  Net net;
  net.cut = {"c"};
  auto id = net.stores.at("b").Put(kT0, "k", "v");
  net.Pump(kT0);
  CHECK(net.acked["b"] == std::vector<uint64_t>{*id});
  CHECK(net.Value("c", "k") == "<none>");
  net.cut.clear();
  net.TickAll(kT0 + absl::Seconds(1));  // the retry reaches c
  CHECK(net.Value("c", "k") == "v");
}

TEST_CASE("Concurrent writes converge on the last writer, whatever the delivery order") {
  Net net;
  net.cut = {"a", "b", "c"};
  net.stores.at("a").Put(kT0 + absl::Seconds(2), "k", "from-a");
  net.stores.at("b").Put(kT0 + absl::Seconds(1), "k", "from-b");  // earlier clock: loses
  net.Pump(kT0);
  net.cut.clear();
  net.TickAll(kT0 + absl::Seconds(20));
  for (const char* n : {"a", "b", "c"}) CHECK(net.Value(n, "k") == "from-a");
  // A node with a clock behind still writes above every version it has seen.
  auto id = net.stores.at("b").Put(kT0, "k", "from-b-later");
  net.Pump(kT0);
  REQUIRE(id);
  for (const char* n : {"a", "b", "c"}) CHECK(net.Value(n, "k") == "from-b-later");
}

TEST_CASE("A delete is a tombstone: a node that missed it does not resurrect the record") {
  Net net;
  net.stores.at("a").Put(kT0, "k", "v");
  net.Pump(kT0);
  net.cut = {"c"};
  net.stores.at("a").Delete(kT0 + absl::Seconds(1), "k");
  net.Pump(kT0 + absl::Seconds(1));
  CHECK(net.Value("c", "k") == "v");
  net.cut.clear();
  net.TickAll(kT0 + absl::Seconds(30));
  for (const char* n : {"a", "b", "c"}) CHECK(net.Value(n, "k") == "<none>");
}

TEST_CASE("A new member is repaired at once") {
  Net net;
  net.stores.at("a").Put(kT0, "k", "v");
  net.Pump(kT0);
  net.stores.emplace("d", ReplicatedStore("d"));
  for (auto& [id, s] : net.stores) s.SetMembers(kT0, {"a", "b", "c", "d"});
  net.Pump(kT0);
  CHECK(net.Value("d", "k") == "v");
}

TEST_CASE("Hybrid logical clock never goes back and passes what it observed") {
  HybridClock c;
  Hlc a = c.Now(kT0);
  Hlc b = c.Now(kT0 - absl::Seconds(5));  // the wall clock stepped back
  CHECK(b > a);
  c.Observe(Hlc{absl::ToUnixMicros(kT0 + absl::Hours(1)), 3});
  CHECK(c.Now(kT0) > Hlc{absl::ToUnixMicros(kT0 + absl::Hours(1)), 3});
}

TEST_CASE("Limits: oversized values and a full store are refused") {
  StoreConfig config;
  config.max_records = 1;
  config.max_value_bytes = 8;
  ReplicatedStore s("a", config);
  CHECK_FALSE(s.Put(kT0, "k", "123456789"));
  CHECK(s.Put(kT0, "k", "1"));
  CHECK_FALSE(s.Put(kT0, "other", "1"));
  CHECK(s.Put(kT0, "k", "2"));  // an existing key may change
}

}  // namespace
}  // namespace exa::scheduler

namespace exa::scheduler {
namespace {

TEST_CASE("Restored records are served, not persisted or sent again, and later writes win") {
  ReplicatedStore before("a");
  before.SetMembers(kT0, {"a"});
  REQUIRE(before.Put(kT0 + absl::Seconds(10), "spec/x", "old"));
  std::vector<StoreRecord> disk = before.TakePersist();
  REQUIRE(disk.size() == 1);

  // A restart with a clock that went backwards: the restored version still orders the next write.
  ReplicatedStore after("a");
  after.Restore(disk);
  CHECK(after.TakePersist().empty());
  CHECK(after.TakeMessages().empty());
  REQUIRE(after.Get("spec/x"));
  CHECK(after.Get("spec/x")->value == "old");
  after.SetMembers(kT0, {"a"});
  REQUIRE(after.Put(kT0, "spec/x", "new"));
  std::vector<StoreRecord> written = after.TakePersist();
  REQUIRE(written.size() == 1);
  CHECK(written[0].version > disk[0].version);
  CHECK(after.Get("spec/x")->value == "new");
}

}  // namespace
}  // namespace exa::scheduler
