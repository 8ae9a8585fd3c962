#include "scheduler/describe.h"

#include <utility>

#include "absl/time/time.h"

#include "membership/member.h"
#include "nlohmann/json.hpp"
#include "scheduler/rollout.h"

namespace exa::scheduler {
namespace {

using nlohmann::json;

membership::MemberState StateOf(NodeLiveness liveness) {
  switch (liveness) {
    case NodeLiveness::kAlive:
      return membership::MemberState::kAlive;
    case NodeLiveness::kSuspect:
      return membership::MemberState::kSuspect;
    case NodeLiveness::kDead:
      return membership::MemberState::kDead;
    case NodeLiveness::kLeft:
      return membership::MemberState::kLeft;
  }
  return membership::MemberState::kLeft;
}

}  // namespace

std::string DescribeStatusJson(const DeploymentStatus& s, int stopping) {
  return json{{"desired", s.desired},
              {"present", s.present},
              {"ready", s.ready - s.ready_lost},
              {"lost", s.lost},
              {"ready_lost", s.ready_lost},
              {"failed", s.failed},
              {"wave", s.wave},
              {"wave_target", s.wave_target},
              {"pending", s.pending},
              {"reason", s.pending_reason},
              {"stopping", stopping}}
      .dump();
}

std::string DescribeReplicasJson(const std::map<std::string, NodeStatus>& nodes,
                                 std::string_view spec_name, int* stopping) {
  // The newest generation of each (track, ordinal): what a rebuilt replica superseded.
  std::map<std::pair<std::string, int>, uint64_t> newest;
  for (const auto& [id, node] : nodes) {
    for (const ReplicaRecord& rec : node.replicas) {
      if (SpecOfTrack(rec.deployment) != spec_name || rec.stopping) continue;
      uint64_t& g = newest[{rec.deployment, rec.ordinal}];
      g = std::max(g, rec.generation);
    }
  }
  json replicas = json::array();
  for (const auto& [id, node] : nodes) {
    for (const ReplicaRecord& rec : node.replicas) {
      if (SpecOfTrack(rec.deployment) != spec_name) continue;
      if (rec.stopping) {
        ++*stopping;
        continue;
      }
      if (node.liveness != NodeLiveness::kAlive &&
          rec.generation < newest[{rec.deployment, rec.ordinal}]) {
        continue;
      }
      replicas.push_back({{"id", ReplicaId(rec.deployment, rec.ordinal)},
                          {"node", id},
                          {"generation", rec.generation},
                          {"phase", ReplicaPhaseName(rec.phase)},
                          {"node_state", membership::MemberStateName(StateOf(node.liveness))}});
    }
  }
  return replicas.dump();
}

std::string DescribeAutoscalingJson(const AutoscaleReport& now,
                                    const std::optional<AutoscaleState>& stored,
                                    const absl::StatusOr<DesiredDeployment>& spec) {
  nlohmann::json out;
  if (spec.ok()) {
    const AutoscalingSpec& a = spec->spec.autoscaling;
    out["min_replicas"] = a.min_replicas;
    out["max_replicas"] = a.max_replicas;
    out["metric"] = a.metric;
    out["unit"] = a.metric == "pendingTokensPerReplica" ? "tokens" : "seconds";
    out["target"] = a.target;
  }
  out["current"] = now.current;
  out["desired"] = now.desired;
  out["ready"] = now.ready;
  out["value"] = now.value < 0 ? nlohmann::json(nullptr) : nlohmann::json(now.value);
  out["panic"] = now.panic;
  out["reason"] = now.reason;
  out["last_scale_up"] = nullptr;
  if (now.last_time_to_ready_s >= 0) {
    out["last_scale_up"] = {{"to", now.last_scale_up_to},
                            {"time_to_ready_s", now.last_time_to_ready_s}};
  }
  out["last_decision"] = nullptr;
  if (stored) {
    out["last_decision"] = {
        {"desired", stored->desired},
        {"at", absl::FormatTime(absl::RFC3339_sec, absl::FromUnixMillis(stored->at_unix_ms),
                                absl::UTCTimeZone())},
        {"reason", stored->reason}};
  }
  return out.dump();
}

}  // namespace exa::scheduler
