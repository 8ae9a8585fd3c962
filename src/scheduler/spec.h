// The desired state an operator writes: `apiVersion: exaserve.io/v1`, `kind: InferenceReplica`
// (docs/architecture.md#orchestration). A spec names a model and how many resident replicas of it
// should run, with the resources, topology preferences, health checks and bring-up waves that
// govern them.
//
//   apiVersion: exaserve.io/v1
//   kind: InferenceReplica
//   metadata: {name: llama-13b-replica}
//   spec:
//     model: llama-13b
//     replicas: 3072
//     resources: {gpu: 1, memory: 53Gi}
//     topology: {preferSameRack: true, preferSameNVLinkDomain: true}
//     healthCheck: {processInterval: 10s, modelInterval: 30s, performanceInterval: 5m}
//     scheduling: {batchSize: 512, warmupReplicas: 256}
//
// plus `version`, `backend`, `labels`, `probe` {prompt, expect}, `deadGrace`, `maxLifetime`,
// `context`, `concurrency`, `rollout`, `maxUnavailable` and `autoscaling` under `spec`. Parsing is
// strict: an unknown field is refused with the nearest valid one, and every error names
// file:line:column, the field path, the value and what is allowed. A document either parses whole
// or not at all (never half-applied).
//
// Thread safety: the functions are pure.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace exa::scheduler {

inline constexpr std::string_view kApiVersion = "exaserve.io/v1";
inline constexpr std::string_view kKindInferenceReplica = "InferenceReplica";

// Bounds that keep a hostile or mistyped spec from asking for absurd work; each is far above
// the reference deployment (3072 replicas, docs/architecture.md#roles).
inline constexpr int kMaxReplicas = 1'000'000;
inline constexpr int kMaxGpusPerReplica = 64;
inline constexpr int kMaxContextTokens = 1 << 24;
inline constexpr int kMaxConcurrency = 1 << 16;
inline constexpr size_t kMaxNameBytes = 63;  // a DNS label: replica ids embed the name
inline constexpr size_t kMaxLabels = 64;
// The most a spec file may hold: a spec is a few KiB, so a larger file is the wrong file.
inline constexpr size_t kMaxSpecFileBytes = size_t{8} << 20;

struct ResourcesSpec {
  int gpu = 1;  // GPUs per replica (tensor-parallel degree at least this)
  // GPU memory reserved per replica; 0 lets the memory planner decide. When set it must cover
  // the planner's estimate, so a reservation can never be smaller than what the replica uses.
  uint64_t memory_bytes = 0;
  bool operator==(const ResourcesSpec&) const = default;
};

struct TopologySpec {
  bool prefer_same_rack = false;
  bool prefer_same_nvlink_domain = true;
  bool operator==(const TopologySpec&) const = default;
};

// docs/architecture.md#health-checks: three levels of health check and their intervals.
struct HealthCheckSpec {
  absl::Duration process_interval = absl::Seconds(10);
  absl::Duration model_interval = absl::Seconds(30);
  absl::Duration performance_interval = absl::Minutes(5);
  bool operator==(const HealthCheckSpec&) const = default;
};

// docs/architecture.md#orchestration: bring-up in waves, warmupReplicas first, then batchSize per
// wave.
struct SchedulingSpec {
  int batch_size = 512;
  int warmup_replicas = 256;
  bool operator==(const SchedulingSpec&) const = default;
};

// docs/architecture.md#health-checks: the model-level probe ("1+1" must answer with something
// containing "2").
struct ProbeSpec {
  std::string prompt = "1+1=";
  std::string expect = "2";
  bool operator==(const ProbeSpec&) const = default;
};

// One rollout stage: how many replicas run the new version once the stage is reached, as a count
// or a percentage of spec.replicas (exactly one is set).
struct RolloutStage {
  int replicas = 0;
  double percent = 0;
  bool operator==(const RolloutStage&) const = default;
};

// Metrics a rollout compares between the new and the old version over each observation window.
inline constexpr std::string_view kRolloutMetrics[] = {"p99Latency", "errorRate", "memory", "ttft"};

// a change of version (or model) is rolled out stage by stage, each stage observed and
// compared with the old version before the next; a regression rolls it back by itself.
struct RolloutSpec {
  // Empty: one node group (12 replicas), 10 %, 50 %, 100 %.
  std::vector<RolloutStage> stages;
  absl::Duration observe = absl::Minutes(30);
  double regression_threshold = 0.10;  // new worse than old by more than this → rollback
  std::vector<std::string> metrics = {"p99Latency", "errorRate", "memory"};
  // Replicas of the old version kept until the rollout completes (the rollback target).
  int keep_rollback_target = 12;
  // Samples each version needs in a window before it is judged; fewer → the window extends.
  int min_samples = 10;
  bool operator==(const RolloutSpec&) const = default;
};

// Metrics an autoscaler follows (docs/architecture.md#autoscaling), averaged over a deployment's
// ready replicas: pendingTokensPerReplica (prompt tokens not yet prefilled plus expected decode
// tokens, per replica), queueTimeP90 and ttftP99 (seconds; written as durations like 500ms).
inline constexpr std::string_view kAutoscalingMetrics[] = {"pendingTokensPerReplica",
                                                           "queueTimeP90", "ttftP99"};

// spec.autoscaling: the replica count follows the load between minReplicas and maxReplicas;
// spec.replicas is the starting count. Absent (`enabled` false): the count is fixed.
struct AutoscalingSpec {
  bool enabled = false;
  int min_replicas = 1;
  int max_replicas = 0;
  std::string metric = "pendingTokensPerReplica";
  double target = 0;  // tokens per replica, or seconds for the latency metrics
  // A scale-up (-down) takes the lowest (highest) count recommended over this window.
  absl::Duration scale_up_stabilization = absl::ZeroDuration();
  absl::Duration scale_down_stabilization = absl::Minutes(5);
  // Per minute: the count may grow to at most max(count × maxScaleUpRate, count + 4) and shrink
  // by at most maxScaleDownRate of it.
  double max_scale_up_rate = 2.0;
  double max_scale_down_rate = 0.5;
  bool operator==(const AutoscalingSpec&) const = default;
};

struct InferenceReplicaSpec {
  std::string name;  // metadata.name
  std::string model;
  std::string version = "v1";
  std::string backend = "cuda";  // cuda | cpu | sim
  int replicas = 0;
  ResourcesSpec resources;
  TopologySpec topology;
  HealthCheckSpec health_check;
  SchedulingSpec scheduling;
  std::map<std::string, std::string> labels;
  ProbeSpec probe;
  absl::Duration dead_grace =
      absl::Seconds(30);  // docs/architecture.md#health-checks: wait 30 s before rebuilding
  absl::Duration max_lifetime =
      absl::ZeroDuration();  // 0: unlimited (docs/architecture.md#leak-detection)
  int context = 4096;        // tokens per sequence (docs/architecture.md#memory-arithmetic)
  int concurrency = 4;       // sequences per replica (docs/architecture.md#memory-arithmetic)
  RolloutSpec rollout;
  // Replicas a rollout or a lifetime restart may take out of service at once; 0: 1 % of
  // replicas, at least 1 (the 99 % availability floor).
  int max_unavailable = 0;
  AutoscalingSpec autoscaling;
  bool operator==(const InferenceReplicaSpec&) const = default;
};

// Spec name → the resource version a document names in `metadata.resourceVersion` (what
// `exaserve-cli get -o yaml` prints): the version its writer read, for optimistic concurrency.
// It is not part of the spec: SpecToYaml leaves it out and equal specs stay equal.
using ResourceVersions = std::map<std::string, uint64_t>;

// A resource version as written (metadata.resourceVersion, --resource-version): decimal digits
// within 64 bits; nullopt otherwise.
std::optional<uint64_t> ParseResourceVersion(std::string_view text);

// Parses one or more YAML documents (separated by `---`) into specs; `source` names the file in
// errors. Every document must be a valid InferenceReplica; names must be unique. When
// `resource_versions` is given it gets the documents' metadata.resourceVersion (those that have
// one); otherwise the field is still checked and then ignored.
absl::StatusOr<std::vector<InferenceReplicaSpec>> ParseSpecs(
    std::string_view yaml_text, std::string_view source,
    ResourceVersions* resource_versions = nullptr);
absl::StatusOr<std::vector<InferenceReplicaSpec>> LoadSpecFile(const std::string& path);

// Checks the cross-field rules ParseSpecs enforces, for specs built in code.
absl::Status ValidateSpec(const InferenceReplicaSpec& spec);

// The spec as canonical YAML (every field, defaults included): what the store keeps and what a
// diff compares. With `resource_version`, metadata.resourceVersion too (what `get -o yaml`
// prints, so that an edited copy can be applied back under optimistic concurrency).
std::string SpecToYaml(const InferenceReplicaSpec& spec,
                       std::optional<uint64_t> resource_version = std::nullopt);

// The replicas a spec's rollout stages put on the new version, resolved against spec.replicas:
// strictly increasing, the last equal to spec.replicas. Defaults are clamped and deduplicated.
std::vector<int> RolloutStageCounts(const InferenceReplicaSpec& spec);

// The cross-field rules of spec.autoscaling (ValidateSpec runs them), and its canonical YAML
// (empty when absent).
absl::Status ValidateAutoscaling(const InferenceReplicaSpec& spec);
std::string AutoscalingToYaml(const AutoscalingSpec& autoscaling);

// spec.max_unavailable, or its default.
int MaxUnavailable(const InferenceReplicaSpec& spec);

// Replicas of the first bring-up wave and of each later one, capped by `replicas`.
int WarmupWave(const InferenceReplicaSpec& spec);

}  // namespace exa::scheduler
