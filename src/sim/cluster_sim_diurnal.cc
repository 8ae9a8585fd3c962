// exaserve-sim cluster --scenario diurnal (cluster_sim.h): a day of request load on an
// autoscaled deployment (sim/traffic_model.h). The node agents report each ready replica's load
// as Node.ListReplicas does, the control loop's autoscaler (scheduler/autoscaler.h) sets the
// count, and a replica the reconciler stops drains: it finishes what it holds before it goes
// (docs/perf/autoscaling.md).
#include <algorithm>
#include <deque>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "sim/cluster_sim_state.h"

namespace exa::sim::cluster_internal {
namespace {

// The peak before burstiness, as a fraction of what maxReplicas replicas serve with every slot
// busy, for a time metric (queueTimeP90, ttftP99), whose target gives no replica size.
constexpr double kUnsizedPeakLoad = 0.5;

}  // namespace

absl::Status ClusterSim::SetupDiurnal() {
  const scheduler::InferenceReplicaSpec& spec = desired_.front().spec;
  if (!spec.autoscaling.enabled) {
    return absl::InvalidArgumentError(
        StrCat("--scenario diurnal: spec ", spec.name,
               " has no spec.autoscaling; the scenario measures the autoscaler"));
  }
  if (o_.trace_file.empty()) {
    return absl::InvalidArgumentError(
        "--scenario diurnal needs --trace FILE: a Mooncake JSON-lines trace or a CSV trace "
        "(Azure's LLM inference traces, BurstGPT), whose burstiness and request lengths the load "
        "takes");
  }
  EXA_ASSIGN_OR_RETURN(traces::Trace trace, traces::ReadTrace(o_.trace_file));
  EXA_ASSIGN_OR_RETURN(TrafficShape shape, ShapeOfTrace(trace));
  TrafficOptions t;
  t.day_s = o_.day_s;
  t.slots = spec.concurrency;
  t.context = spec.context;
  t.seed = o_.seed ^ 0x5bd1e995ULL;
  t.ttft_target_s =
      spec.autoscaling.metric == "ttftP99" ? spec.autoscaling.target : o_.ttft_target_s;
  traffic_ = std::make_unique<TrafficModel>(t, std::move(shape));
  const scheduler::AutoscalingSpec& a = spec.autoscaling;
  // The peak as the share of maxReplicas' slots it keeps busy before burstiness. Sized: the peak
  // an operator sized maxReplicas for, where in the busiest minute maxReplicas replicas each hold
  // the target's pending tokens (Little's law). Else `peak_load`.
  const int slots = std::max(1, spec.concurrency);
  peak_sized_ = o_.peak_load == 0 && a.metric == "pendingTokensPerReplica";
  peak_slot_load_ =
      peak_sized_ ? a.target * traffic_->MeanSlotSeconds() /
                        (traffic_->MeanPendingTokenSeconds() * traffic_->BusiestMinute() * slots)
      : o_.peak_load > 0 ? o_.peak_load
                         : kUnsizedPeakLoad;
  traffic_->SetPeakRate(peak_slot_load_ * a.max_replicas * slots / traffic_->MeanSlotSeconds());
  return absl::OkStatus();
}

void ClusterSim::StepTraffic(absl::Time now) {
  if (traffic_start_ == absl::InfiniteFuture()) traffic_start_ = now;
  if (phase_ == Phase::kFault && !measuring_) {
    traffic_->ResetFigures();  // the warm-up is over
    measuring_ = true;
  }
  const double t = Since(now, traffic_start_);
  std::vector<uint64_t> serving;
  int held = 0;
  int nodes_in_use = 0;  // nodes holding at least one replica
  for (SimNode& n : nodes_) {
    if (n.killed) continue;
    std::erase_if(n.replicas, [&](const AgentReplica& r) {
      if (!r.draining || !traffic_->Idle(r.traffic_id, t)) return false;
      traffic_->Forget(r.traffic_id, t);  // drained: it loses nothing
      return true;
    });
    if (!n.replicas.empty()) nodes_in_use++;
    for (const AgentReplica& r : n.replicas) {
      held++;
      if (r.record.phase == ReplicaPhase::kReady && !r.draining) serving.push_back(r.traffic_id);
    }
  }
  // The second just past, so that the reports built next see every arrival as past.
  if (t >= 1) traffic_->Step(t - 1, 1, serving);
  if (!measuring_) return;
  replica_seconds_ += held;
  traffic_seconds_ += 1;
  peak_held_ = std::max(peak_held_, held);
  least_held_ = least_held_ < 0 ? held : std::min(least_held_, held);
  node_seconds_ += nodes_in_use;
  most_nodes_ = std::max(most_nodes_, nodes_in_use);
  least_nodes_ = least_nodes_ < 0 ? nodes_in_use : std::min(least_nodes_, nodes_in_use);
  if (static_cast<int64_t>(t) % 900 == 0) {
    load_series_.push_back({{"h", Round3(t / 3600)},
                            {"arrivals_per_s", Round3(traffic_->Rate(t))},
                            {"replicas", held},
                            {"nodes_in_use", nodes_in_use},
                            {"ready", serving.size()}});
  }
}

void ClusterSim::ReportLoad(absl::Time now, const AgentReplica& a, scheduler::ReportedReplica& r) {
  if (traffic_start_ == absl::InfiniteFuture() || a.record.phase != ReplicaPhase::kReady) return;
  const ReplicaLoad load = traffic_->Load(a.traffic_id, Since(now, traffic_start_));
  r.pending_tokens = load.pending_tokens;
  r.running_sequences = load.running;
  r.waiting_sequences = load.waiting;
  r.ttft_p99_ms = load.ttft_s * 1000;
  r.queue_time_p90_ms = load.queue_s * 1000;
}

bool ClusterSim::Drain(absl::Time now, SimNode& n, const Action& a) {
  const double t = traffic_start_ == absl::InfiniteFuture() ? 0 : Since(now, traffic_start_);
  for (AgentReplica& r : n.replicas) {
    if (r.record.deployment != a.deployment || r.record.ordinal != a.ordinal ||
        r.record.generation != a.generation) {
      continue;
    }
    if (!traffic_->Idle(r.traffic_id, t)) {
      r.draining = true;
      return true;
    }
    traffic_->Forget(r.traffic_id, t);
    return false;  // holds nothing: the stop takes it at once
  }
  return false;
}

void ClusterSim::NoteDecisions(absl::Time now, const scheduler::ControlOutput& out) {
  if (phase_ != Phase::kFault) return;
  for (const scheduler::AutoscaleReport& r : out.autoscaled) {
    if (r.direction != 0) decisions_.push_back({Since(now, fault_at_), r.direction, r.panic});
  }
}

json ClusterSim::DiurnalFigures() {
  const scheduler::AutoscalingSpec& a = desired_.front().spec.autoscaling;
  // A reversal: a decision against the direction of the one before it. The goal is at most one
  // within any scale-down stabilization window; the autoscaler lets a panic through regardless.
  const double window = absl::ToDoubleSeconds(a.scale_down_stabilization);
  int up = 0, down = 0, reversals = 0, panics = 0, most = 0, most_calm = 0, last = 0;
  std::deque<double> recent, calm;  // reversals within the window before; those not panics
  auto note = [window](std::deque<double>& q, double t, int& most_in_one) {
    q.push_back(t);
    while (q.front() <= t - window) q.pop_front();
    most_in_one = std::max(most_in_one, static_cast<int>(q.size()));
  };
  for (const Decision& x : decisions_) {
    (x.direction > 0 ? up : down)++;
    panics += x.panic;
    if (last != 0 && x.direction != last) {
      reversals++;
      note(recent, x.t, most);
      if (!x.panic) note(calm, x.t, most_calm);
    }
    last = x.direction;
  }
  json d = traffic_->Figures(/*series_every=*/60);
  d["peak_sizing"] =
      peak_sized_ ? "maxReplicas at the target in the busiest minute" : "--peak-load of every slot";
  // How hard the peak pushes maxReplicas: the share of their slots its busiest minute keeps busy.
  d["busiest_peak_minute_slot_load"] = Round3(peak_slot_load_ * traffic_->BusiestMinute());
  d["simulated_h"] = Round3(traffic_seconds_ / 3600);
  d["day_h"] = Round3(o_.day_s / 3600);
  d["warmup_min"] = absl::ToDoubleMinutes(kDiurnalWarmup);
  d["autoscaler"] = {
      {"metric", a.metric},
      {"target", a.target},
      {"min_replicas", a.min_replicas},
      {"max_replicas", a.max_replicas},
      {"decisions_up", up},
      {"decisions_down", down},
      {"reversals", reversals},
      {"scale_down_stabilization_s", window},
      {"most_reversals_in_one_window", most},
      {"most_reversals_in_one_window_but_panics", most_calm},
      {"panic_decisions", panics},
      {"reversals_per_window",
       window > 0 && traffic_seconds_ > 0 ? Round3(reversals / (traffic_seconds_ / window)) : 0.0}};
  const double static_seconds = static_cast<double>(peak_held_) * traffic_seconds_;
  d["replica_hours"] = Round3(replica_seconds_ / 3600);
  d["static_peak_replicas"] = peak_held_;
  d["static_replica_hours"] = Round3(static_seconds / 3600);
  d["replica_hours_ratio"] = static_seconds > 0 ? Round3(replica_seconds_ / static_seconds) : 0;
  d["least_replicas"] = least_held_;
  // Density: nodes holding any replica. Scale-down empties whole nodes when the elastic
  // replicas were packed (docs/architecture.md#autoscaling).
  d["most_nodes_in_use"] = most_nodes_;
  d["least_nodes_in_use"] = least_nodes_;
  const double static_node_seconds = static_cast<double>(most_nodes_) * traffic_seconds_;
  d["node_hours_ratio"] = static_node_seconds > 0 ? Round3(node_seconds_ / static_node_seconds) : 0;
  d["load"] = load_series_;
  return d;
}

}  // namespace exa::sim::cluster_internal
