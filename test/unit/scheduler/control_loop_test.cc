// The control loop's step, driven directly: only the acting scheduler (the Raft leader after its
// barrier) gets actions, writes and relabels back; every scheduler keeps the status; starts carry
// what the node must start; operator commands apply once; a deleted spec stops its replicas.
#include <catch2/catch.hpp>

#include "common/strings.h"
#include "scheduler/control_loop.h"

namespace exa::scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

constexpr const char* kSpec = R"(apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: chat}
spec:
  model: llama-7b
  version: v1
  replicas: 4
  labels: {team: search}
  resources: {gpu: 1}
  scheduling: {batchSize: 4, warmupReplicas: 4}
)";

membership::Member GpuMember(const std::string& id) {
  membership::Member m;
  m.id = id;
  m.state = membership::MemberState::kAlive;
  m.state_changed = kT0 - absl::Hours(1);
  m.metadata.rack = "rack-a";
  m.metadata.roles = {"inference"};
  m.metadata.gpus = membership::GpuSummary{4, 81920, "H100-SXM"};
  return m;
}

// Two GPU nodes whose agents obey every action at once (a start is ready at the next report).
struct Cluster {
  ControlLoop loop{ControlLoopOptions{}};
  std::vector<membership::Member> members = {GpuMember("gpu-1"), GpuMember("gpu-2")};
  StoreRecords state;
  std::map<std::string, std::vector<ReportedReplica>> agents;  // node → replicas
  // Nodes that pull weights, and what each has staged; the others start from their own disk.
  std::map<std::string, std::set<std::string>> pulled;
  uint64_t index = 1;
  absl::Time now = kT0;

  void Put(const std::string& key, const std::string& value) {
    state[key] = StoreRecord{key, value, false, Version{Hlc{static_cast<int64_t>(++index), 0}, ""}};
  }
  ControlOutput Step(bool acting) {
    now += absl::Seconds(1);
    ControlInput in;
    in.now = now;
    in.members = &members;
    in.state = &state;
    in.leader = acting ? "sched-1" : "sched-2";
    in.term = 3;
    in.acting = acting;
    std::vector<NodeReport> reports;
    for (const auto& m : members) {
      auto p = pulled.find(m.id);
      reports.push_back(NodeReport{m.id, 1, p != pulled.end(),
                                   p == pulled.end() ? std::set<std::string>{} : p->second,
                                   agents[m.id]});
    }
    in.reports = reports;
    ControlOutput out = loop.Step(in);
    for (const auto& [key, value] : out.writes) Put(key, value);
    return out;
  }
  void Obey(const ControlOutput& out) {
    for (const NodeAction& a : out.actions) {
      std::vector<ReportedReplica>& replicas = agents[a.action.node];
      if (a.action.kind == ActionKind::kStart) {
        ReportedReplica r;
        r.replica_id = a.action.replica_id();
        r.state = "ready";
        r.model = a.model;
        r.version = a.version;
        r.generation = a.action.generation;
        r.devices = a.action.allocation.gpus;
        r.labels = a.labels;
        r.state_since = now;
        replicas.push_back(std::move(r));
      } else if (a.action.kind == ActionKind::kPrestage) {
        if (pulled.count(a.action.node)) pulled[a.action.node].insert(a.action.weights);
      } else if (a.action.kind == ActionKind::kStop) {
        std::erase_if(replicas, [&](const ReportedReplica& r) {
          return r.replica_id == a.action.replica_id() && r.generation == a.action.generation;
        });
      }
    }
  }
  int Running() const {
    int n = 0;
    for (const auto& [node, replicas] : agents) n += static_cast<int>(replicas.size());
    return n;
  }
};

TEST_CASE("Only the acting scheduler gets actions back; every scheduler keeps the status") {
  Cluster follower;
  follower.Put("spec/chat", kSpec);
  ControlOutput out = follower.Step(/*acting=*/false);
  CHECK(out.actions.empty());
  CHECK(out.writes.empty());  // a follower never stores a rollout state
  REQUIRE(follower.loop.status().count("chat"));
  INFO(follower.loop.status().at("chat").pending_reason);
  CHECK(follower.loop.status().at("chat").desired == 4);
  CHECK(follower.loop.reconciler() == "sched-2");

  Cluster leader;
  leader.Put("spec/chat", kSpec);
  out = leader.Step(/*acting=*/true);
  REQUIRE(out.actions.size() == 4);
  const NodeAction& start = out.actions.front();
  CHECK(start.action.kind == ActionKind::kStart);
  CHECK(start.model == "llama-7b");
  CHECK(start.version == "v1");
  CHECK(start.labels.at(std::string(kDeploymentLabel)) == start.action.deployment);
  CHECK(start.labels.at("team") == "search");
  CHECK(start.labels.at("version") == "v1");
  REQUIRE(out.writes.size() == 1);
  CHECK(out.writes.front().first == "rollout/chat");
}

TEST_CASE("The leader converges and then does nothing; a deleted spec stops its replicas") {
  Cluster c;
  c.Put("spec/chat", kSpec);
  for (int i = 0; i < 5; ++i) c.Obey(c.Step(true));
  CHECK(c.Running() == 4);
  CHECK(c.loop.status().at("chat").ready == 4);
  ControlOutput idle = c.Step(true);
  CHECK(idle.actions.empty());
  CHECK(idle.writes.empty());  // the stored rollout state is already what it would write

  c.state.erase("spec/chat");
  ControlOutput out = c.Step(true);
  CHECK(out.gone == std::vector<std::string>{"chat"});
  c.Obey(out);
  for (int i = 0; i < 3; ++i) c.Obey(c.Step(true));
  CHECK(c.Running() == 0);
}

TEST_CASE("A stored label rule relabels running replicas, from the leader only") {
  Cluster c;
  c.Put("spec/chat", kSpec);
  for (int i = 0; i < 5; ++i) c.Obey(c.Step(true));
  cluster::LabelRule rule;
  rule.selector = {{"team", "search"}};
  rule.set = {{"tier", "gold"}};
  c.Put(StrCat(kLabelRulePrefix, "{\"team\":\"search\"}"), LabelRuleToJson(rule));
  CHECK(c.Step(false).relabels.empty());
  ControlOutput out = c.Step(true);
  REQUIRE(out.relabels.size() == 4);
  CHECK(out.relabels.front().change.set.at("tier") == "gold");
}

TEST_CASE("An operator's rollout command is applied once, by the acting scheduler") {
  Cluster c;
  c.Put("spec/chat", kSpec);
  for (int i = 0; i < 5; ++i) c.Obey(c.Step(true));
  c.Put("rollout-command/chat", RolloutCommandToJson({42, RolloutCommand::kPause}));
  c.Step(false);
  CHECK(RolloutStateIn(c.state, "chat").last_command == 0);
  c.Step(true);
  CHECK(RolloutStateIn(c.state, "chat").last_command == 42);
  const auto* events = c.loop.events("chat");
  REQUIRE(events != nullptr);
  int commands = 0;
  for (const ControlLoop::Event& e : *events) {
    commands += e.message.rfind("rollout pause", 0) == 0;
  }
  c.Step(true);
  int again = 0;
  for (const ControlLoop::Event& e : *c.loop.events("chat")) {
    again += e.message.rfind("rollout pause", 0) == 0;
  }
  CHECK(commands == 1);
  CHECK(again == 1);
}

}  // namespace
}  // namespace exa::scheduler

namespace exa::scheduler {
namespace {

constexpr const char* kAutoscaledSpec = R"(apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: chat}
spec:
  model: llama-7b
  replicas: 2
  resources: {gpu: 1}
  scheduling: {batchSize: 8, warmupReplicas: 8}
  autoscaling:
    minReplicas: 1
    maxReplicas: 8
    metric: pendingTokensPerReplica
    target: 1000
    scaleDownStabilization: 30s
)";

// Spreads `total` pending tokens over the ready replicas, as their agents report them.
void Load(Cluster& c, int64_t total) {
  const int n = c.Running();
  for (auto& [node, replicas] : c.agents) {
    for (ReportedReplica& r : replicas) r.pending_tokens = n == 0 ? 0 : total / n;
  }
}

int StoredCount(const Cluster& c) {
  auto s = AutoscaleStateIn(c.state, "chat");
  return s ? s->desired : -1;
}

TEST_CASE("An autoscaled spec follows the load; the count is stored and a new leader carries on") {
  Cluster c;
  c.Put("spec/chat", kAutoscaledSpec);
  for (int i = 0; i < 10; ++i) {
    Load(c, 2000);
    c.Obey(c.Step(true));
  }
  CHECK(c.Running() == 2);
  CHECK(StoredCount(c) == 2);
  for (int i = 0; i < 90; ++i) {
    Load(c, 6000);
    c.Obey(c.Step(true));
  }
  CHECK(c.Running() == 6);
  CHECK(StoredCount(c) == 6);
  CHECK(c.loop.status().at("chat").desired == 6);
  bool announced = false;
  for (const auto& e : *c.loop.events("chat")) {
    announced = announced || e.message.find("autoscaler: 2 -> ") != std::string::npos;
  }
  CHECK(announced);
  // The scale-up's time to ready is reported: replicas here are ready at the next report.
  const AutoscaleReport* report = c.loop.autoscale("chat");
  REQUIRE(report != nullptr);
  CHECK(report->last_scale_up_to == 6);
  CHECK(report->last_time_to_ready_s >= 1);
  CHECK(report->last_time_to_ready_s <= 90);
  bool timed = false;
  for (const auto& e : *c.loop.events("chat")) {
    timed = timed || e.message.find("replicas ready") != std::string::npos;
  }
  CHECK(timed);

  // A new leader, its windows empty, starts from the stored count: nothing stops.
  Cluster next;
  next.state = c.state;
  next.agents = c.agents;
  next.now = c.now;
  Load(next, 6000);
  ControlOutput out = next.Step(true);
  for (const NodeAction& a : out.actions) CHECK(a.action.kind != ActionKind::kStop);
  CHECK(next.loop.status().at("chat").desired == 6);

  // A follower reads the same count and writes nothing.
  Cluster follower;
  follower.state = c.state;
  follower.agents = c.agents;
  CHECK(follower.Step(false).writes.empty());
  CHECK(follower.loop.status().at("chat").desired == 6);

  // The load goes: after the stabilization window the count comes down, never below min.
  for (int i = 0; i < 200; ++i) {
    Load(next, 0);
    next.Obey(next.Step(true));
  }
  CHECK(StoredCount(next) == 1);
  CHECK(next.Running() == 1);
}

TEST_CASE("A rising load pre-stages the weights where the next replicas will go") {
  Cluster c;
  c.pulled = {{"gpu-1", {"llama-7b@v1"}}, {"gpu-2", {}}};  // 4 slots each; gpu-2 lacks weights
  std::string spec = kAutoscaledSpec;
  spec.replace(spec.find("{gpu: 1}"), 8, "{gpu: 1, memory: 60Gi}");  // one a GPU
  c.Put("spec/chat", spec);
  for (int i = 0; i < 70; ++i) {
    Load(c, 1000 * c.Running());  // at the target
    c.Obey(c.Step(true));
  }
  REQUIRE(c.Running() == 2);
  CHECK(c.agents["gpu-2"].empty());  // the floor and the elastic replica on the staged node
  CHECK(c.pulled["gpu-2"].empty());
  // The load climbs 200 tokens a second: before the count outgrows gpu-1, gpu-2 pulls.
  int staged_at = -1, outgrown_at = -1;
  for (int i = 1; i <= 60 && (staged_at < 0 || outgrown_at < 0); ++i) {
    Load(c, 2000 + 200 * i);
    ControlOutput out = c.Step(true);
    if (staged_at < 0 && c.pulled["gpu-2"].count("llama-7b@v1")) staged_at = i;
    if (outgrown_at < 0 && StoredCount(c) > 4) outgrown_at = i;
    c.Obey(out);
    if (staged_at < 0 && c.pulled["gpu-2"].count("llama-7b@v1")) staged_at = i;
  }
  INFO("staged at " << staged_at << " s, count above 4 at " << outgrown_at << " s");
  REQUIRE(staged_at > 0);
  CHECK((outgrown_at < 0 || staged_at < outgrown_at));
  bool announced = false;
  for (const auto& e : *c.loop.events("chat")) {
    announced = announced || e.message.find("prestage llama-7b@v1 on gpu-2: load rising") == 0;
  }
  CHECK(announced);
}

TEST_CASE("Autoscaling spec errors name the field and what is allowed") {
  const std::string base = std::string(kAutoscaledSpec);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return ParseSpecs(s, "chat.yaml").status();
  };
  auto message = [](const absl::Status& s) { return std::string(s.message()); };
  CHECK_THAT(message(with("minReplicas: 1", "minReplicas: 9")),
             Catch::Contains("minReplicas 9 and maxReplicas 8"));
  CHECK_THAT(message(with("target: 1000", "target: 0")),
             Catch::Contains("spec.autoscaling.target") && Catch::Contains("(0, "));
  CHECK_THAT(message(with("target: 1000", "target: -5")),
             Catch::Contains("spec.autoscaling.target"));
  CHECK_THAT(message(with("metric: pendingTokensPerReplica", "metric: qps")),
             Catch::Contains("expected pendingTokensPerReplica, queueTimeP90 or ttftP99"));
  CHECK_THAT(
      message(with("scaleDownStabilization: 30s", "scaleDownStabilization: 2h")),
      Catch::Contains("spec.autoscaling.scaleDownStabilization") && Catch::Contains("at most 1h"));
  CHECK(with("minReplicas: 1", "minReplicas: 0").ok());  // scale to zero
  CHECK_THAT(message(with("minReplicas: 1", "minReplicas: -1")),
             Catch::Contains("spec.autoscaling.minReplicas"));
  CHECK_THAT(message(with("replicas: 2", "replicas: 20")),
             Catch::Contains("spec.replicas: 20 is the starting count"));
  CHECK_THAT(message(with("metric: pendingTokensPerReplica\n    target: 1000",
                          "metric: ttftP99\n    target: 1000")),
             Catch::Contains("spec.autoscaling.target") && Catch::Contains("duration like"));
  CHECK_THAT(message(with("    target: 1000\n", "    target: 1000\n    maxScaleUpRate: 1\n")),
             Catch::Contains("spec.autoscaling.maxScaleUpRate") && Catch::Contains("(1, 1000]"));
  CHECK_THAT(message(with("    target: 1000\n", "    target: 1000\n    tagret: 5\n")),
             Catch::Contains("did you mean \"target\""));
  // It reads back as it was written.
  auto parsed = ParseSpecs(base, "chat.yaml");
  REQUIRE(parsed.ok());
  auto again = ParseSpecs(SpecToYaml(parsed->front()), "again.yaml");
  REQUIRE(again.ok());
  CHECK(again->front() == parsed->front());
  CHECK(again->front().autoscaling.target == 1000);
}

TEST_CASE("Activation records of models nothing can activate go once stale") {
  StoreRecords records;
  const auto put = [&](const std::string& model, std::string value) {
    const std::string key = StrCat(kActivationPrefix, model);
    records[key] = StoreRecord{key, std::move(value)};
  };
  const absl::Time now = kT0;
  const std::string fresh = StrCat(absl::ToUnixMillis(now - absl::Seconds(1)));
  const std::string old = StrCat(absl::ToUnixMillis(now - kActivationFresh - absl::Seconds(1)));
  put("served", old);        // still autoscaled to zero: kept however old
  put("deleted", old);       // its spec is gone: goes
  put("just-asked", fresh);  // gone too, but requests may still be held for it: kept for now
  put("garbled", "yesterday");
  records["spec/web"] = StoreRecord{"spec/web", "{}"};  // not an activation record
  CHECK(StaleActivations(records, {"served"}, now, 16) ==
        std::vector<std::string>{"activation/deleted", "activation/garbled"});
  CHECK(StaleActivations(records, {"served"}, now, 1).size() == 1);  // bounded per call
  CHECK(StaleActivations(records, {"served"}, now + kActivationFresh, 16).size() == 3);
}

}  // namespace
}  // namespace exa::scheduler
