// Alert-rule evaluation (docs/architecture.md#monitoring-and-alerts), the sans-IO core of the
// observer role: scraped samples and `now` in, alerts out. The five rules of the source document,
// each with its threshold, duration ("for"), sampling interval and severity, all configurable:
//
//   rule                  alertname                 condition (defaults)               severity
//   replica health        ExaServeReplicasShort     ready / desired < 95 % for 5 min   P0
//                         per deployment: exaserve_deployment_replicas_{ready,desired}, the max
//                         over the scheduler nodes that answered the last scrape; every 10 s
//   inference latency     ExaServeLatencyP99High    P99 > 2 s for 3 min                P1
//                         histogram_quantile over every gateway's exaserve_gateway_ttft_seconds
//                         increase in the last 2 min; every 30 s
//   memory                ExaServeGpuMemoryHigh     used / total > 90 % for 10 min     P2
//                         per node and device: exaserve_gpu_memory_{used,total}_bytes, and on
//                         CPU nodes process_resident_memory_bytes / exaserve_host_memory_budget
//                         _bytes as device "host"; every 30 s
//   network               ExaServeNetworkSaturated  NIC rate / link speed > 80 % for 5 min  P2
//                         per node, device and direction: exaserve_network_{receive,transmit}
//                         _bytes_total over 2 min against exaserve_network_speed_bytes; every 1 min
//   model load            ExaServeModelLoadSlow     a load > 30 s, every load          P2
//                         a replica whose exaserve_replica_weight_load_seconds is new or changed
//                         and over the threshold, or a weight pull over it (the increase of
//                         exaserve_weights_pull_seconds_count not in the bucket at the threshold);
//                         fires at once and stays firing `for` (5 min) after the last such load
//
// Each alert (a rule and its labels) moves inactive → pending (condition true) → firing (true
// for `for`) → resolved (false again); a pending alert whose condition clears is dropped. A rule
// with no data at all (no scheduler, gateway or node exporting its metrics answered) keeps its
// alerts as they are, and so does an alert about one node whose last scrape failed: silence is
// not recovery.
//
// Memory is bounded: only the metrics the rules read are kept (Wants), at most
// `history_samples` points per series and `max_series` series (further ones are counted and
// dropped), series and targets unseen for longer than the rules look back are forgotten, and at
// most `max_resolved` resolved alerts are remembered for `resolved_retention`.
//
// Thread safety: none; the observer guards it with a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "metrics/exposition_parser.h"

namespace exa::metrics {

struct RuleSettings {
  double threshold = 0;  // a ratio, or seconds for latency and model load
  absl::Duration for_duration = absl::ZeroDuration();
  absl::Duration interval = absl::Seconds(10);  // how often the rule is evaluated
  std::string severity;
};

// Defaults: docs/architecture.md#monitoring-and-alerts. Network and model load have no severity
// there; both are capacity problems to fix the same day, so P2 (as
// config/prometheus/exaserve-rules.yml).
struct AlertRulesConfig {
  RuleSettings replicas{0.95, absl::Minutes(5), absl::Seconds(10), "P0"};
  RuleSettings latency{2.0, absl::Minutes(3), absl::Seconds(30), "P1"};
  RuleSettings gpu_memory{0.9, absl::Minutes(10), absl::Seconds(30), "P2"};
  RuleSettings network{0.8, absl::Minutes(5), absl::Minutes(1), "P2"};
  // for_duration: how long the alert stays firing after the last slow load.
  RuleSettings model_load{30, absl::Minutes(5), absl::Seconds(10), "P2"};
  std::string latency_histogram = "exaserve_gateway_ttft_seconds";
  double latency_quantile = 0.99;
  absl::Duration latency_window = absl::Minutes(2);
  absl::Duration network_window = absl::Minutes(2);
  size_t history_samples = 64;
  size_t max_series = 100000;
  size_t max_resolved = 100;
  absl::Duration resolved_retention = absl::Hours(1);
};

enum class AlertState { kPending, kFiring, kResolved };
std::string_view AlertStateName(AlertState state);

struct Alert {
  std::string name;      // the alertname, e.g. "ExaServeReplicasShort"
  std::string severity;  // "P0", "P1", "P2"
  // alertname, severity, dimension and the rule's own labels (deployment; instance and node;
  // device; direction; replica and model or stage), sorted by name.
  LabelSet labels;
  AlertState state = AlertState::kPending;
  double value = 0;                                // at the last evaluation: the ratio, or seconds
  double threshold = 0;                            // what `value` was compared with
  std::string summary;                             // one line for people
  absl::Time active_since = absl::InfinitePast();  // the condition first held (pending)
  absl::Time fired_at = absl::InfinitePast();
  absl::Time resolved_at = absl::InfinitePast();
};

// A scrape target: instance is "host:http_port", node the member's id.
struct ScrapeTarget {
  std::string instance;
  std::string node;
  std::string rack;   // labels for Prometheus file_sd (the observer writes them)
  std::string roles;  // comma list

  friend bool operator==(const ScrapeTarget&, const ScrapeTarget&) = default;
};

class AlertEvaluator {
 public:
  explicit AlertEvaluator(AlertRulesConfig config);

  // Whether the rules read metric `name`: the observer parses only these.
  bool Wants(std::string_view name) const;
  // The samples of one successful scrape of `target`, taken at `now`.
  void Ingest(absl::Time now, const ScrapeTarget& target, const std::vector<ParsedSample>& samples);
  // A failed scrape: the target's gauges count as absent until it answers again.
  void ScrapeFailed(absl::Time now, const ScrapeTarget& target);
  // The targets of a new scrape round: any other target (gone from membership) counts as not
  // answering, so its last values stop counting at once; it is forgotten later.
  void SetTargets(const std::vector<ScrapeTarget>& targets);
  // Runs the rules due at `now` (each at its interval); returns the alerts that started firing
  // or resolved at this evaluation, in that state.
  std::vector<Alert> Evaluate(absl::Time now);

  // Firing, then pending (each by severity, then name), then resolved, newest first.
  std::vector<Alert> Alerts() const;

  struct Stats {
    size_t targets = 0;
    size_t targets_up = 0;
    size_t series = 0;
    size_t points = 0;
    uint64_t series_dropped = 0;  // refused past max_series
  };
  Stats stats() const;
  const AlertRulesConfig& config() const { return config_; }

 private:
  struct Point {
    absl::Time t;
    double v;
  };
  struct Series {
    std::vector<Point> points;  // oldest first, at most history_samples
    absl::Time last_seen = absl::InfinitePast();
  };
  // (instance, labels) → series, per metric name.
  using SeriesMap = std::map<std::pair<std::string, LabelSet>, Series>;
  struct TargetState {
    std::string node;
    bool up = false;
    absl::Time last_ok = absl::InfinitePast();
    absl::Time last_attempt = absl::InfinitePast();
  };
  // What one rule found: labels (the rule's own), value, whether the condition holds.
  struct Candidate {
    LabelSet labels;
    double value = 0;
    bool active = false;
    std::string summary;
  };
  enum Rule { kReplicas, kLatency, kGpuMemory, kNetwork, kModelLoad, kRuleCount };
  using Key = std::pair<std::string, LabelSet>;  // alertname, full labels

  const RuleSettings& Settings(Rule rule) const;
  // A gauge's value from the last scrape of a target that answered it; nullopt when stale.
  std::optional<double> Fresh(const std::string& instance, const Series& s) const;
  const SeriesMap* Find(std::string_view name) const;
  // An alert about one node whose last scrape failed: it holds (silence is not recovery).
  bool Unanswered(const Alert& alert) const;
  void DetectSlowLoads(absl::Time now, const std::string& instance);
  void Forget(absl::Time now);

  std::optional<std::vector<Candidate>> Replicas() const;
  std::optional<std::vector<Candidate>> Latency(absl::Time now) const;
  std::optional<std::vector<Candidate>> GpuMemory() const;
  std::optional<std::vector<Candidate>> Network(absl::Time now) const;
  std::vector<Candidate> ModelLoads(absl::Time now) const;
  void Apply(Rule rule, absl::Time now, const std::vector<Candidate>& candidates,
             std::vector<Alert>* changed);

  const AlertRulesConfig config_;
  const absl::Duration look_back_;  // how far back any rule reads
  std::map<std::string, SeriesMap, std::less<>> series_;
  size_t series_count_ = 0;
  uint64_t series_dropped_ = 0;
  std::map<std::string, TargetState> targets_;
  // Slow loads seen: (instance, node, replica, model or stage) labels → when last seen.
  std::map<LabelSet, std::pair<absl::Time, double>> slow_loads_;
  absl::Time last_eval_[kRuleCount];
  std::map<Key, Alert> active_;  // pending and firing
  std::vector<Alert> resolved_;  // oldest first
};

// Prometheus' histogram_quantile: `buckets` are (upper bound, cumulative count) sorted by bound,
// the last +Inf. NaN without observations or with fewer than two buckets. Exposed for tests.
double HistogramQuantile(double q, const std::vector<std::pair<double, double>>& buckets);

}  // namespace exa::metrics
