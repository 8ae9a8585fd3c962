// The parts of `exaserve-cli describe` (the Scheduler's Describe call) that read the reconciler's
// view: the deployment's counts and the replicas it lists (docs/reference/cli.md). Pure: data
// in, JSON text out, so what a user reads is tested without a cluster.
// Thread-safety: none needed; the caller holds the scheduler's lock over `nodes`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "scheduler/control_loop.h"
#include "scheduler/reconciler.h"
#include "scheduler/store_keys.h"

namespace exa::scheduler {

// The status object. "ready" counts ready replicas on live nodes only, as the
// exaserve_deployment_replicas_ready metric does: a suspect or dead node's replicas keep their
// place (deadGrace) but serve no one; they are "ready_lost" (and within "lost").
std::string DescribeStatusJson(const DeploymentStatus& status, int stopping);

// The replicas of spec `spec_name` (every track of it) as a JSON array of {id, node,
// generation, phase, node_state}, by node. Replicas draining after a stop are counted in
// `*stopping`, not listed. A copy on a node that is not alive whose ordinal runs a newer
// generation elsewhere (rebuilt after its node died) is not listed: it no longer counts.
std::string DescribeReplicasJson(const std::map<std::string, NodeStatus>& nodes,
                                 std::string_view spec_name, int* stopping);

// The autoscaler of an autoscaled spec (`exaserve-cli autoscale status`): its bounds, metric and
// target, the count in force and the one wanted now, the metric's value over `ready` replicas,
// and the last stored decision with its reason. {min_replicas, max_replicas, metric, unit,
// target, current, desired, ready, value (null: none reported), panic, reason, last_decision:
// {desired, at, reason} or null}.
std::string DescribeAutoscalingJson(const AutoscaleReport& now,
                                    const std::optional<AutoscaleState>& stored,
                                    const absl::StatusOr<DesiredDeployment>& spec);

}  // namespace exa::scheduler
