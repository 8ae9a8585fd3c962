// The reconciler's step: waves, pre-staging, lost vs dead, restarts, scale up and down,
// duplicates and idempotence.
#include <catch2/catch.hpp>

#include <limits>
#include <set>
#include <string>

#include "common/strings.h"
#include "fmt/format.h"
#include "scheduler/reconciler.h"

namespace exa::scheduler {
namespace {

constexpr uint64_t kGi = uint64_t{1} << 30;
const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

struct World {
  std::vector<NodeStatus> nodes;
  std::vector<DesiredDeployment> desired;

  explicit World(int n, int replicas, int warmup = 4, int batch = 8) {
    for (int i = 0; i < n; ++i) {
      NodeStatus s;
      s.inventory.id = fmt::format("node-{:02d}", i);
      s.inventory.rack = fmt::format("rack-{}", i % 2);
      s.inventory.roles = {cluster::Role::kInference};
      for (int g = 0; g < 8; ++g) s.inventory.gpus.push_back(GpuDevice{80 * kGi, "nvl"});
      s.reported = true;
      s.boot_id = 1;
      s.staged_models = {"llama-13b@v1"};
      nodes.push_back(std::move(s));
    }
    DesiredDeployment d;
    d.spec.name = "llama";
    d.spec.model = "llama-13b";
    d.spec.replicas = replicas;
    d.spec.scheduling.warmup_replicas = warmup;
    d.spec.scheduling.batch_size = batch;
    d.replica_bytes = 53 * kGi;
    desired.push_back(d);
  }

  ReconcileResult Step(absl::Time now) { return Reconcile(now, desired, nodes, {}); }

  // Carries out the actions as obedient node agents; started replicas become ready at once
  // when `ready` is set.
  void Apply(const ReconcileResult& r, bool ready) {
    for (const Action& a : r.actions) {
      NodeStatus& n = Node(a.node);
      if (a.kind == ActionKind::kStart) {
        n.replicas.push_back(ReplicaRecord{a.deployment, a.ordinal, a.generation, a.allocation,
                                           ready ? ReplicaPhase::kReady : ReplicaPhase::kStarting});
      } else if (a.kind == ActionKind::kStop) {
        std::erase_if(n.replicas, [&](const ReplicaRecord& x) {
          return x.deployment == a.deployment && x.ordinal == a.ordinal &&
                 x.generation == a.generation;
        });
      } else {
        n.staged_models.insert(a.weights);
      }
    }
  }
  void MarkReady() {
    for (NodeStatus& n : nodes) {
      for (ReplicaRecord& r : n.replicas) r.phase = ReplicaPhase::kReady;
    }
  }
  NodeStatus& Node(const std::string& id) {
    for (NodeStatus& n : nodes) {
      if (n.inventory.id == id) return n;
    }
    FAIL("no node " << id);
    return nodes.front();
  }
  // A step, noting the fewest ready replicas and the most surge copies at once so far.
  ReconcileResult WatchedStep(absl::Time now) {
    ReconcileResult r = Step(now);
    REQUIRE(r.deployments.size() == 1);
    min_ready = std::min(min_ready, r.deployments[0].ready);
    max_surging = std::max(max_surging, r.deployments[0].surging);
    return r;
  }
  int min_ready = std::numeric_limits<int>::max();
  int max_surging = 0;

  int Count(ActionKind kind, const ReconcileResult& r) const {
    int c = 0;
    for (const Action& a : r.actions) c += a.kind == kind;
    return c;
  }
  int Hosted() const {
    int c = 0;
    for (const NodeStatus& n : nodes) c += static_cast<int>(n.replicas.size());
    return c;
  }
};

TEST_CASE("Waves: warmupReplicas first, then batchSize, each after the last is ready") {
  World w(4, 20, /*warmup=*/4, /*batch=*/8);
  auto r = w.Step(kT0);
  CHECK(w.Count(ActionKind::kStart, r) == 4);
  w.Apply(r, false);
  // Not ready yet: nothing more starts, however often the step runs.
  CHECK(w.Step(kT0 + absl::Seconds(1)).actions.empty());
  w.MarkReady();
  r = w.Step(kT0 + absl::Seconds(2));
  CHECK(w.Count(ActionKind::kStart, r) == 8);
  CHECK(r.deployments[0].wave == 2);
  w.Apply(r, true);
  r = w.Step(kT0 + absl::Seconds(3));
  CHECK(w.Count(ActionKind::kStart, r) == 8);
  w.Apply(r, true);
  CHECK(w.Step(kT0 + absl::Seconds(4)).actions.empty());
  CHECK(w.Hosted() == 20);
}

TEST_CASE("A wave waits for its weights to be pre-staged on the target nodes") {
  World w(2, 4, 4, 4);
  for (NodeStatus& n : w.nodes) n.staged_models.clear();
  auto r = w.Step(kT0);
  CHECK(w.Count(ActionKind::kStart, r) == 0);
  CHECK(w.Count(ActionKind::kPrestage, r) >= 1);
  CHECK(r.deployments[0].waiting_for_weights == 4);
  w.Apply(r, true);  // the nodes now hold the weights
  r = w.Step(kT0 + absl::Seconds(1));
  CHECK(w.Count(ActionKind::kStart, r) == 4);
}

TEST_CASE("The same inputs give the same actions: two reconcilers converge") {
  World w(4, 20, 20, 20);
  auto a = w.Step(kT0);
  auto b = w.Step(kT0);
  REQUIRE(a.actions.size() == b.actions.size());
  for (size_t i = 0; i < a.actions.size(); ++i) {
    CHECK(a.actions[i].node == b.actions[i].node);
    CHECK(a.actions[i].replica_id() == b.actions[i].replica_id());
    CHECK(a.actions[i].generation == b.actions[i].generation);
  }
  CHECK(a.actions[0].replica_id() == "llama-0");
}

TEST_CASE("Lost vs dead: suspected left alone, dead rebuilt only after deadGrace") {
  World w(4, 12, 12, 12);
  w.Apply(w.Step(kT0), true);
  REQUIRE(w.Hosted() == 12);
  // Spread: each node holds 3. Node 0 is suspected, then confirmed dead.
  NodeStatus& n0 = w.nodes[0];
  int on_n0 = static_cast<int>(n0.replicas.size());
  REQUIRE(on_n0 > 0);
  n0.liveness = NodeLiveness::kSuspect;
  CHECK(w.Step(kT0 + absl::Seconds(10)).actions.empty());
  n0.liveness = NodeLiveness::kDead;
  n0.liveness_since = kT0 + absl::Seconds(12);
  auto r = w.Step(kT0 + absl::Seconds(41));  // 29 s after death
  CHECK(r.actions.empty());
  CHECK(r.deployments[0].lost == on_n0);
  r = w.Step(kT0 + absl::Seconds(42));  // 30 s after death
  CHECK(w.Count(ActionKind::kStart, r) == on_n0);
  for (const Action& a : r.actions) {
    CHECK(a.node != "node-00");
    CHECK(a.generation == 2);
    CHECK(a.reason == "rebuild");
  }
  w.Apply(r, true);
  // Node 0 comes back with the same boot: its old generation is stopped, nothing else moves.
  n0.liveness = NodeLiveness::kAlive;
  r = w.Step(kT0 + absl::Seconds(60));
  CHECK(w.Count(ActionKind::kStop, r) == on_n0);
  CHECK(w.Count(ActionKind::kStart, r) == 0);
  for (const Action& a : r.actions) {
    CHECK(a.node == "node-00");
    CHECK(a.generation == 1);
  }
}

TEST_CASE("A node back within the grace keeps its replicas") {
  World w(4, 12, 12, 12);
  w.Apply(w.Step(kT0), true);
  w.nodes[1].liveness = NodeLiveness::kDead;
  w.nodes[1].liveness_since = kT0 + absl::Seconds(5);
  CHECK(w.Step(kT0 + absl::Seconds(25)).actions.empty());
  w.nodes[1].liveness = NodeLiveness::kAlive;
  CHECK(w.Step(kT0 + absl::Seconds(60)).actions.empty());
}

TEST_CASE("A restarted node (new boot id) is re-checked: what it lost is rebuilt at once") {
  World w(4, 12, 12, 12);
  w.Apply(w.Step(kT0), true);
  NodeStatus& n2 = w.nodes[2];
  int lost = static_cast<int>(n2.replicas.size());
  n2.boot_id = 2;
  n2.replicas.clear();  // in-process replicas died with the process
  auto r = w.Step(kT0 + absl::Seconds(3));
  CHECK(w.Count(ActionKind::kStart, r) == lost);
  // Before the restarted node reports, it holds nothing and receives nothing.
  n2.reported = false;
  for (const Action& a : w.Step(kT0 + absl::Seconds(3)).actions) CHECK(a.node != "node-02");
}

TEST_CASE("Scale down stops the highest ordinals; scale up starts the next") {
  World w(4, 12, 12, 12);
  w.Apply(w.Step(kT0), true);
  w.desired[0].spec.replicas = 10;
  auto r = w.Step(kT0 + absl::Seconds(1));
  CHECK(w.Count(ActionKind::kStop, r) == 2);
  for (const Action& a : r.actions) CHECK(a.ordinal >= 10);
  w.Apply(r, true);
  w.desired[0].spec.replicas = 14;
  // The first wave (12) is the boundary: two start, then two more once those are ready.
  r = w.Step(kT0 + absl::Seconds(2));
  CHECK(w.Count(ActionKind::kStart, r) == 2);
  for (const Action& a : r.actions) CHECK(a.ordinal >= 10);
  w.Apply(r, true);
  r = w.Step(kT0 + absl::Seconds(3));
  CHECK(w.Count(ActionKind::kStart, r) == 2);
  for (const Action& a : r.actions) CHECK(a.ordinal >= 12);
}

TEST_CASE("An autoscaled deployment's scale-down empties whole nodes") {
  // 8 nodes of 12 slots in 2 racks; a floor of 4 spread over 4 nodes, then up to 72.
  World w(8, 4, 72, 72);
  w.desired[0].spec.autoscaling.enabled = true;
  w.desired[0].spec.autoscaling.min_replicas = 4;
  w.desired[0].spec.autoscaling.max_replicas = 96;
  w.Apply(w.Step(kT0), true);
  auto nodes_in_use = [&w] {
    int n = 0;
    for (const NodeStatus& s : w.nodes) n += s.replicas.empty() ? 0 : 1;
    return n;
  };
  CHECK(nodes_in_use() == 4);
  w.desired[0].spec.replicas = 72;  // the elastic 68 fill the floor's nodes, then open more
  w.Apply(w.Step(kT0 + absl::Seconds(1)), true);
  REQUIRE(w.Hosted() == 72);
  CHECK(nodes_in_use() == 6);  // 48 on the 4, then one more node in each rack
  w.desired[0].spec.replicas = 44;
  w.Apply(w.Step(kT0 + absl::Seconds(2)), true);
  CHECK(w.Hosted() == 44);
  CHECK(nodes_in_use() == 4);  // the two opened last are empty again
  // A fixed-count deployment spreads: the same 44 take every node.
  World fixed(8, 44, 72, 72);
  fixed.Apply(fixed.Step(kT0), true);
  int used = 0;
  for (const NodeStatus& s : fixed.nodes) used += s.replicas.empty() ? 0 : 1;
  CHECK(used == 8);
}

TEST_CASE("A rising trend pre-stages the nodes the next replicas would go to, and starts nothing") {
  World w(8, 4, 64, 64);  // 8 nodes of 12 slots in 2 racks; a floor of 4
  w.desired[0].spec.autoscaling.enabled = true;
  w.desired[0].spec.autoscaling.min_replicas = 4;
  w.desired[0].spec.autoscaling.max_replicas = 96;
  for (NodeStatus& n : w.nodes) n.staged_models.clear();
  for (int i = 0; i < 2; ++i) w.nodes[i].staged_models = {"llama-13b@v1"};
  w.Apply(w.Step(kT0), true);  // prestage where the floor goes, then start it
  w.Apply(w.Step(kT0 + absl::Seconds(1)), true);
  REQUIRE(w.Hosted() == 4);
  std::set<std::string> staged;
  for (const NodeStatus& n : w.nodes) {
    if (!n.staged_models.empty()) staged.insert(n.inventory.id);
  }
  REQUIRE(staged.size() == 4);
  // 24 more likely: the floor's nodes have room for them (packed), so no other node is asked.
  w.desired[0].prestage_ahead = 24;
  auto r = w.Step(kT0 + absl::Seconds(2));
  CHECK(w.Count(ActionKind::kStart, r) == 0);
  CHECK(w.Count(ActionKind::kPrestage, r) == 0);
  // 60 more likely: beyond the room there, one more node in each rack pre-stages.
  w.desired[0].prestage_ahead = 60;
  r = w.Step(kT0 + absl::Seconds(3));
  CHECK(w.Count(ActionKind::kStart, r) == 0);
  CHECK(w.Count(ActionKind::kPrestage, r) == 2);
  for (const Action& a : r.actions) {
    CHECK(staged.count(a.node) == 0);
    CHECK(a.reason.find("load rising: 60 more replicas") != std::string::npos);
  }
  w.Apply(r, true);
  // When the count moves, those replicas start at once, without waiting for a pull.
  w.desired[0].prestage_ahead = 0;
  w.desired[0].spec.replicas = 64;
  r = w.Step(kT0 + absl::Seconds(4));
  CHECK(w.Count(ActionKind::kStart, r) == 60);
  CHECK(w.Count(ActionKind::kPrestage, r) == 0);
}

TEST_CASE("Duplicates converge: the ready one of a generation; a newer one once it is ready") {
  World w(3, 1, 1, 1);
  Allocation a{"node-00", {0}, 53 * kGi}, b{"node-01", {0}, 53 * kGi};
  w.nodes[0].replicas.push_back({"llama", 0, 1, a, ReplicaPhase::kReady});
  w.nodes[1].replicas.push_back({"llama", 0, 1, b, ReplicaPhase::kStarting});
  auto r = w.Step(kT0);
  REQUIRE(r.actions.size() == 1);
  CHECK(r.actions[0].kind == ActionKind::kStop);
  CHECK(r.actions[0].node == "node-01");
  // A newer generation (a rebuild after a partition, a surge copy) still starting: the ready
  // older one keeps serving until it is ready, then stops.
  w.nodes[1].replicas[0].generation = 2;
  CHECK(w.Step(kT0).actions.empty());
  w.nodes[1].replicas[0].phase = ReplicaPhase::kReady;
  r = w.Step(kT0);
  REQUIRE(r.actions.size() == 1);
  CHECK(r.actions[0].node == "node-00");
  CHECK(r.actions[0].reason == "replaced by generation 2 on node-01");
}

TEST_CASE("A copy starting beside a ready replica on a draining node takes the ordinal over") {
  // The old one stops for the drain this step; the starting copy is the ordinal's replica, not
  // a surge waiting beside it, so no third one is placed.
  World w(3, 1, 1, 1);
  Allocation a{"node-00", {0}, 53 * kGi}, b{"node-01", {0}, 53 * kGi};
  w.nodes[0].replicas.push_back({"llama", 0, 1, a, ReplicaPhase::kReady});
  w.nodes[1].replicas.push_back({"llama", 0, 2, b, ReplicaPhase::kStarting});
  w.nodes[0].inventory.draining = true;
  auto r = w.Step(kT0);
  REQUIRE(r.actions.size() == 1);
  CHECK(r.actions[0].kind == ActionKind::kStop);
  CHECK(r.actions[0].node == "node-00");
  CHECK(r.actions[0].reason == "node drained");
  REQUIRE(r.deployments.size() == 1);
  CHECK(r.deployments[0].present == 1);
  CHECK(r.deployments[0].surging == 0);
}

TEST_CASE("A failed replica is recreated only after its crash backoff, which grows") {
  World w(2, 1, 1, 1);
  w.Apply(w.Step(kT0), true);
  ReplicaRecord* r = nullptr;
  for (NodeStatus& n : w.nodes) {
    if (!n.replicas.empty()) r = &n.replicas.front();
  }
  REQUIRE(r != nullptr);
  r->phase = ReplicaPhase::kFailed;
  r->phase_since = kT0 + absl::Seconds(100);
  auto step = w.Step(kT0 + absl::Seconds(105));
  CHECK(step.actions.empty());
  CHECK(step.deployments[0].failed == 1);
  step = w.Step(kT0 + absl::Seconds(110));
  REQUIRE(w.Count(ActionKind::kStop, step) == 1);
  REQUIRE(w.Count(ActionKind::kStart, step) == 1);
  for (const Action& a : step.actions) {
    if (a.kind == ActionKind::kStart) CHECK(a.generation == 2);
  }
  CHECK(CrashBackoff(1) == absl::Seconds(10));
  CHECK(CrashBackoff(2) == absl::Seconds(20));
  CHECK(CrashBackoff(40) == absl::Minutes(5));
}

TEST_CASE("A deleted deployment's replicas are stopped") {
  World w(2, 2, 2, 2);
  w.Apply(w.Step(kT0), true);
  w.desired.clear();
  auto r = w.Step(kT0 + absl::Seconds(1));
  CHECK(w.Count(ActionKind::kStop, r) == 2);
}

TEST_CASE("An unplaceable remainder is reported, not dropped") {
  World w(1, 20, 20, 20);
  auto r = w.Step(kT0);
  CHECK(w.Count(ActionKind::kStart, r) == 12);
  CHECK(r.deployments[0].pending == 8);
  CHECK(r.deployments[0].pending_reason.find("lack free GPU memory") != std::string::npos);
}

TEST_CASE("WaveTarget walks 256, 768, ... up to the replicas") {
  InferenceReplicaSpec s;
  s.replicas = 3072;
  CHECK(WaveTarget(s, 0) == 256);
  CHECK(WaveTarget(s, 255) == 256);
  CHECK(WaveTarget(s, 256) == 768);
  CHECK(WaveTarget(s, 2816) == 3072);
  s.replicas = 3;
  CHECK(WaveTarget(s, 0) == 3);
}

}  // namespace
}  // namespace exa::scheduler

namespace exa::scheduler {
namespace {

TEST_CASE("A drained node's replicas are stopped and placed again elsewhere") {
  World w(3, 3, 3, 3);
  w.Apply(w.Step(kT0), true);
  REQUIRE(w.Hosted() == 3);
  NodeStatus& drained = w.Node("node-00");
  REQUIRE(drained.replicas.size() == 1);
  const int ordinal = drained.replicas[0].ordinal;
  const uint64_t generation = drained.replicas[0].generation;
  drained.inventory.draining = true;
  auto r = w.Step(kT0 + absl::Seconds(1));
  REQUIRE(w.Count(ActionKind::kStop, r) == 1);
  REQUIRE(w.Count(ActionKind::kStart, r) == 1);
  for (const Action& a : r.actions) {
    CHECK(a.ordinal == ordinal);
    if (a.kind == ActionKind::kStop) {
      CHECK(a.node == "node-00");
      CHECK(a.reason == "node drained");
    } else {
      CHECK(a.node != "node-00");
      CHECK(a.generation == generation + 1);
    }
  }
  w.Apply(r, true);
  CHECK(w.Step(kT0 + absl::Seconds(2)).actions.empty());
  CHECK(w.Node("node-00").replicas.empty());
}

TEST_CASE("A drained node's replica still draining does not hold its ordinal back") {
  World w(3, 3, 3, 3);
  w.Apply(w.Step(kT0), true);
  NodeStatus& drained = w.Node("node-00");
  REQUIRE(drained.replicas.size() == 1);
  drained.inventory.draining = true;
  drained.replicas[0].stopping = true;  // the agent drains it; no copy exists yet
  const int ordinal = drained.replicas[0].ordinal;
  auto r = w.Step(kT0 + absl::Seconds(1));
  REQUIRE(w.Count(ActionKind::kStart, r) == 1);
  CHECK(w.Count(ActionKind::kStop, r) == 0);
  CHECK(r.actions.front().ordinal == ordinal);
  CHECK(r.actions.front().node != "node-00");
  CHECK(r.actions.front().generation == 2);
}

TEST_CASE("cpu and sim replicas go only to nodes offering cpu devices, and back") {
  World w(2, 2, 2, 2);
  w.Node("node-00").inventory.device_kind = "cpu";
  SECTION("cuda") {
    auto r = w.Step(kT0);
    REQUIRE(w.Count(ActionKind::kStart, r) == 2);
    for (const Action& a : r.actions) CHECK(a.node == "node-01");
  }
  SECTION("cpu") {
    w.desired[0].spec.backend = "cpu";
    auto r = w.Step(kT0);
    REQUIRE(w.Count(ActionKind::kStart, r) == 2);
    for (const Action& a : r.actions) CHECK(a.node == "node-00");
  }
  SECTION("sim, with no cpu node: pending with the reason") {
    w.desired[0].spec.backend = "sim";
    w.Node("node-00").inventory.device_kind = "gpu";
    auto r = w.Step(kT0);
    CHECK(w.Count(ActionKind::kStart, r) == 0);
    CHECK(r.deployments[0].pending == 2);
    CHECK(r.deployments[0].pending_reason.find("2 offer no cpu devices") != std::string::npos);
  }
}

}  // namespace
}  // namespace exa::scheduler

namespace exa::scheduler {
namespace {

TEST_CASE(
    "Max lifetime without room for a copy: stop-then-start, maxUnavailable at most, jittered") {
  World w(4, 48, 48, 48);  // 12 per node fill 8 x 80Gi: no room for a surge copy
  w.desired[0].spec.max_lifetime = absl::Hours(24);
  w.desired[0].spec.max_unavailable = 2;
  w.Apply(w.Step(kT0), true);
  for (NodeStatus& n : w.nodes) {
    for (ReplicaRecord& r : n.replicas) r.phase_since = kT0;
  }
  REQUIRE(w.Hosted() == 48);
  CHECK(w.Step(kT0 + absl::Hours(21)).actions.empty());  // below 90 % of the lifetime
  std::map<std::string, int> restarts;
  int max_out = 0;
  absl::Time t = kT0 + absl::Hours(21);
  for (; t < kT0 + absl::Hours(25); t += absl::Minutes(1)) {
    auto r = w.Step(t);
    for (const Action& a : r.actions) {
      if (a.kind == ActionKind::kStop) {
        CHECK(a.reason == "max lifetime");
        restarts[a.replica_id()]++;
      }
    }
    int stopping = w.Count(ActionKind::kStop, r);
    max_out = std::max(max_out, stopping);
    // Obedient nodes: stopped at once; a restarted replica becomes ready a minute later.
    w.Apply(r, false);
    for (NodeStatus& n : w.nodes) {
      for (ReplicaRecord& rec : n.replicas) {
        if (rec.phase == ReplicaPhase::kStarting && rec.phase_since + absl::Minutes(1) <= t) {
          rec.phase = ReplicaPhase::kReady;
          rec.phase_since = t;
        }
        if (rec.phase == ReplicaPhase::kStarting && rec.phase_since == absl::InfinitePast()) {
          rec.phase_since = t;
        }
      }
    }
  }
  CHECK(restarts.size() == 48);  // every replica once
  for (const auto& [id, n] : restarts) CHECK(n == 1);
  CHECK(max_out <= 2);
  // Jitter: not every replica has the same lifetime.
  std::set<int64_t> lifetimes;
  for (int o = 0; o < 48; ++o) {
    lifetimes.insert(
        absl::ToInt64Seconds(JitteredLifetime(w.desired[0].spec, ReplicaId("llama", o), 1)));
  }
  CHECK(lifetimes.size() > 10);
}

TEST_CASE("Max lifetime with room: a surge copy first, the old one stops once it is ready") {
  World w(4, 20, 20, 20);  // 32 GPUs, 20 replicas: room for copies
  w.desired[0].spec.max_lifetime = absl::Hours(24);
  w.desired[0].spec.max_unavailable = 2;
  w.Apply(w.Step(kT0), true);
  for (NodeStatus& n : w.nodes) {
    for (ReplicaRecord& r : n.replicas) r.phase_since = kT0;
  }
  std::map<std::string, int> surges, replaced;
  for (absl::Time t = kT0 + absl::Hours(21); t < kT0 + absl::Hours(25); t += absl::Minutes(1)) {
    auto r = w.WatchedStep(t);
    for (const Action& a : r.actions) {
      if (a.kind == ActionKind::kStart) {
        CHECK(a.reason.rfind("max lifetime: surge copy of generation 1 on ", 0) == 0);
        CHECK(a.generation == 2);
        // Never onto the node of the replica it replaces.
        for (const ReplicaRecord& x : w.Node(a.node).replicas) CHECK(x.ordinal != a.ordinal);
        surges[a.replica_id()]++;
      } else if (a.kind == ActionKind::kStop) {
        CHECK(a.reason.rfind("replaced by generation 2 on ", 0) == 0);
        CHECK(a.generation == 1);
        replaced[a.replica_id()]++;
      }
    }
    w.Apply(r, false);
    for (NodeStatus& n : w.nodes) {  // a copy is ready a minute after it started
      for (ReplicaRecord& rec : n.replicas) {
        if (rec.phase == ReplicaPhase::kStarting && rec.phase_since == absl::InfinitePast()) {
          rec.phase_since = t;
        } else if (rec.phase == ReplicaPhase::kStarting &&
                   rec.phase_since + absl::Minutes(1) <= t) {
          rec.phase = ReplicaPhase::kReady;
          rec.phase_since = t;
        }
      }
    }
  }
  CHECK(surges.size() == 20);  // every replica once, by a copy
  CHECK(replaced.size() == 20);
  for (const auto& [id, n] : surges) CHECK(n == 1);
  CHECK(w.min_ready == 20);   // never one out of service
  CHECK(w.max_surging <= 2);  // at most maxUnavailable copies at once
  CHECK(w.Hosted() == 20);
}

TEST_CASE("Max lifetime: a surge copy that fails goes; the replica then restarts in place") {
  World w(2, 1, 1, 1);
  w.desired[0].spec.max_lifetime = absl::Hours(24);
  w.Apply(w.Step(kT0), true);
  for (NodeStatus& n : w.nodes) {
    for (ReplicaRecord& r : n.replicas) r.phase_since = kT0;
  }
  auto r = w.Step(kT0 + absl::Hours(25));
  REQUIRE(w.Count(ActionKind::kStart, r) == 1);
  w.Apply(r, false);
  for (NodeStatus& n : w.nodes) {
    for (ReplicaRecord& rec : n.replicas) {
      if (rec.generation == 2) rec.phase = ReplicaPhase::kFailed;
    }
  }
  r = w.Step(kT0 + absl::Hours(25) + absl::Minutes(1));
  // The failed copy stops; the old one (ready, expired) is stopped to restart in place.
  std::vector<std::string> reasons;
  for (const Action& a : r.actions) {
    if (a.kind == ActionKind::kStop) reasons.push_back(a.reason);
  }
  std::sort(reasons.begin(), reasons.end());
  CHECK(reasons == std::vector<std::string>{"max lifetime", "surge copy failed"});
}

TEST_CASE("A replica flagged as leaking is replaced by a surge copy, with no max lifetime") {
  World w(4, 8, 8, 8);
  w.desired[0].spec.max_unavailable = 1;
  w.Apply(w.Step(kT0), true);
  REQUIRE(w.Hosted() == 8);
  for (const Action& a : w.Step(kT0 + absl::Hours(1)).actions) {
    FAIL_CHECK("nothing flagged, yet " << ActionKindName(a.kind) << " " << a.replica_id() << ": "
                                       << a.reason);
  }
  // Leak detection flagged two replicas (the scheduler sets `leaking` from its LeakDetector).
  std::map<int, std::string> flagged_on;
  for (NodeStatus& n : w.nodes) {
    for (ReplicaRecord& r : n.replicas) {
      if (r.ordinal == 2 || r.ordinal == 5) {
        r.leaking = true;
        flagged_on[r.ordinal] = n.inventory.id;
      }
    }
  }
  REQUIRE(flagged_on.size() == 2);
  absl::Time t = kT0 + absl::Hours(1);
  int copies = 0, replaced = 0;
  for (int step = 0; step < 10; ++step, t += absl::Minutes(1)) {
    auto r = w.WatchedStep(t);
    for (const Action& a : r.actions) {
      if (a.kind == ActionKind::kStart) {
        REQUIRE(flagged_on.count(a.ordinal) == 1);
        CHECK(a.reason == "memory leak: surge copy of generation 1 on " + flagged_on[a.ordinal]);
        CHECK(a.replacement == Replacement::kMemoryLeak);
        CHECK(a.node != flagged_on[a.ordinal]);
        CHECK(a.generation == 2);
        CHECK(r.deployments[0].leak_restarts == 1);
        CHECK(r.deployments[0].lifetime_restarts == 0);
        copies++;
      } else if (a.kind == ActionKind::kStop) {
        CHECK(a.reason.rfind("replaced by generation 2 on ", 0) == 0);
        CHECK(a.generation == 1);
        replaced++;
      }
    }
    w.Apply(r, false);
    w.MarkReady();  // a copy is ready by the next step
  }
  CHECK(copies == 2);
  CHECK(replaced == 2);
  CHECK(w.min_ready == 8);    // never one out of service
  CHECK(w.max_surging <= 1);  // maxUnavailable copies at once
  CHECK(w.Hosted() == 8);
  for (const NodeStatus& n : w.nodes) {
    for (const ReplicaRecord& r : n.replicas) CHECK_FALSE(r.leaking);  // the new generations
  }
}

TEST_CASE("A leaking replica with no room for a copy is restarted in place, before expired ones") {
  World w(1, 8, 8, 8);  // one node, 8 GPUs, 8 replicas: no room for a copy
  w.desired[0].spec.max_lifetime = absl::Hours(24);
  w.desired[0].spec.max_unavailable = 1;
  w.Apply(w.Step(kT0), true);
  for (ReplicaRecord& r : w.nodes[0].replicas) {
    r.phase_since = kT0;
    r.leaking = r.ordinal == 6;
  }
  // Every replica is past its lifetime, but the leaking one goes first, and only one at a time.
  auto r = w.Step(kT0 + absl::Hours(30));
  REQUIRE(w.Count(ActionKind::kStop, r) == 1);
  REQUIRE(w.Count(ActionKind::kStart, r) == 0);  // not before the node reports it gone
  for (const Action& a : r.actions) {
    CHECK(a.ordinal == 6);
    CHECK(a.reason == "memory leak");
    CHECK(a.replacement == Replacement::kMemoryLeak);
  }
  CHECK(r.deployments[0].leak_restarts == 1);
  CHECK(r.deployments[0].lifetime_restarts == 0);
  // The node drains it: reported, stopping. Nothing starts in its place yet, and nothing else
  // restarts (it is the one replica out of maxUnavailable 1).
  for (ReplicaRecord& x : w.nodes[0].replicas) {
    if (x.ordinal == 6) x.stopping = true;
  }
  r = w.Step(kT0 + absl::Hours(30) + absl::Seconds(1));
  CHECK(r.actions.empty());
  CHECK(r.deployments[0].ready == 7);
  // Gone: the next generation (2, not a fresh 1) starts.
  std::erase_if(w.nodes[0].replicas, [](const ReplicaRecord& x) { return x.ordinal == 6; });
  r = w.Step(kT0 + absl::Hours(30) + absl::Seconds(2));
  REQUIRE(w.Count(ActionKind::kStart, r) == 1);
  CHECK(r.actions.front().ordinal == 6);
}

TEST_CASE("A replica still draining after a stop keeps its generation and its memory") {
  World w(1, 8, 8, 8);
  w.Apply(w.Step(kT0), true);
  // The node still drains generation 3 of ordinal 2 (say an earlier restart), and ordinal 2
  // has no serving replica: the next one waits, then starts as generation 4.
  for (ReplicaRecord& x : w.nodes[0].replicas) {
    if (x.ordinal == 2) {
      x.generation = 3;
      x.stopping = true;
    }
  }
  auto r = w.Step(kT0 + absl::Seconds(1));
  CHECK(w.Count(ActionKind::kStart, r) == 0);
  CHECK(w.Count(ActionKind::kStop, r) == 0);  // no second stop for a draining one
  // Gone: the caller remembers what it saw reported (generations_seen), so the next is 4.
  std::erase_if(w.nodes[0].replicas, [](const ReplicaRecord& x) { return x.ordinal == 2; });
  w.desired[0].generations_seen[2] = 3;
  r = w.Step(kT0 + absl::Seconds(2));
  REQUIRE(w.Count(ActionKind::kStart, r) == 1);
  CHECK(r.actions.front().ordinal == 2);
  CHECK(r.actions.front().generation == 4);
  CHECK(r.actions.front().reason == "rebuild");
}

}  // namespace
}  // namespace exa::scheduler
