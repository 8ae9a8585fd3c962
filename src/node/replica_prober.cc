#include "node/replica_prober.h"

#include <set>

#include "common/logging.h"

namespace exa::node {

ReplicaProber::ReplicaProber(const ReplicaHost& host, HealthOptions options,
                             metrics::Registry& registry, OnChange on_change)
    : host_(host),
      options_(std::move(options)),
      on_change_(std::move(on_change)),
      healthy_gauge_(registry.AddGauge("exaserve_replica_healthy",
                                       "1 while the replica passes its process and model checks.",
                                       {"replica"})),
      probes_(registry.AddCounter("exaserve_replica_probes_total", "Model-level probes by result.",
                                  {"replica", "result"})) {
  absl::MutexLock states_lock(&states_mu_);
  for (const auto& r : host_.replicas()) StateFor(*r);
}

ReplicaProber::State& ReplicaProber::StateFor(const Replica& r) {
  auto it = states_.find(r.id);
  if (it != states_.end()) return it->second;
  HealthOptions o = options_;
  // probe_expect is the bundled model's answer. Other models, and the sim backend (synthetic
  // tokens whatever the model), are held to their own first greedy answer
  // (docs/architecture.md#health-checks).
  if (r.model->name != kBundledModelName || r.engine->info().backend == "sim") {
    o.probe_expect.clear();
  }
  healthy_gauge_.WithLabels({r.id}).Set(1);
  return states_.emplace(r.id, State(o)).first->second;
}

void ReplicaProber::Report(const Replica& replica, State& state) {
  bool healthy = state.health.healthy();
  healthy_gauge_.WithLabels({replica.id}).Set(healthy ? 1 : 0);
  if (healthy == state.reported_healthy) return;
  state.reported_healthy = healthy;
  if (healthy) {
    EXA_LOG_INFO("health", "replica healthy again", {{"replica", replica.id}});
  } else {
    EXA_LOG_WARN("health", "replica unhealthy",
                 {{"replica", replica.id}, {"reason", state.health.reason()}});
  }
  on_change_(replica.id, healthy, state.health.reason());
}

void ReplicaProber::CheckProcesses() {
  absl::MutexLock states_lock(&states_mu_);
  std::set<std::string> serving;
  for (const auto& r : host_.replicas()) {
    serving.insert(r->id);
    engine::EngineLoad load = r->engine->Load();
    State& state = StateFor(*r);
    state.health.OnProcessCheck(load.steps, load.running + load.waiting > 0);
    Report(*r, state);
  }
  // A replica that left the serving set (stopped, failed) is not healthy: its series reads 0
  // instead of its last verdict, and its state is forgotten (a restart starts afresh).
  for (auto it = states_.begin(); it != states_.end();) {
    if (serving.count(it->first) != 0) {
      ++it;
      continue;
    }
    healthy_gauge_.WithLabels({it->first}).Set(0);
    it = states_.erase(it);
  }
}

void ReplicaProber::SendProbes() {
  absl::MutexLock states_lock(&states_mu_);
  for (const auto& r : host_.replicas()) {
    State& state = StateFor(*r);
    auto probe = std::make_shared<Probe>();
    engine::GenerateRequest request;
    request.prompt_tokens = r->model->tokenizer->tokenizer().Encode(options_.probe_prompt, true);
    request.max_tokens = options_.probe_max_tokens;
    request.priority = true;  // past a full queue, ahead of waiting requests
    request.callback = [probe](const engine::StreamEvent& e) {
      absl::MutexLock lock(&probe->mu);
      probe->text += e.text;
      if (e.finished) {
        probe->finished = true;
        probe->ok = e.status.ok();
      }
    };
    auto id = r->engine->Submit(std::move(request));
    absl::MutexLock lock(&probe->mu);
    if (id.ok()) {
      probe->id = *id;
      probe->submitted = true;
    }
    state.probe = probe;
  }
}

void ReplicaProber::CollectProbes() {
  absl::MutexLock states_lock(&states_mu_);
  for (const auto& r : host_.replicas()) {
    State& state = StateFor(*r);
    if (!state.probe) continue;
    std::optional<std::string> answer;
    bool cancel = false;
    engine::RequestId id = 0;
    {
      Probe& probe = *state.probe;
      absl::MutexLock lock(&probe.mu);
      if (probe.finished && probe.ok) answer = probe.text;
      cancel = probe.submitted && !probe.finished;
      id = probe.id;
    }
    if (cancel) r->engine->Cancel(id);
    state.probe.reset();
    uint64_t ok_before = state.health.probes_ok();
    state.health.OnProbeResult(answer);
    probes_.WithLabels({r->id, state.health.probes_ok() > ok_before ? "ok" : "failed"}).Increment();
    Report(*r, state);
  }
}

bool ReplicaProber::Healthy(const std::string& replica_id) const {
  absl::MutexLock states_lock(&states_mu_);
  auto it = states_.find(replica_id);
  return it == states_.end() || it->second.health.healthy();
}

}  // namespace exa::node
