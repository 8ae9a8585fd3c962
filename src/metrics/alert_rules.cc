#include "metrics/alert_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <tuple>

#include "common/strings.h"

namespace exa::metrics {
namespace {

constexpr std::string_view kDesired = "exaserve_deployment_replicas_desired";
constexpr std::string_view kReady = "exaserve_deployment_replicas_ready";
constexpr std::string_view kGpuUsed = "exaserve_gpu_memory_used_bytes";
constexpr std::string_view kGpuTotal = "exaserve_gpu_memory_total_bytes";
// What the device itself reports (NVML), preferred per device when a node exports it.
constexpr std::string_view kDeviceUsed = "exaserve_gpu_device_memory_used_bytes";
constexpr std::string_view kDeviceTotal = "exaserve_gpu_device_memory_total_bytes";
constexpr std::string_view kResident = "process_resident_memory_bytes";
constexpr std::string_view kHostBudget = "exaserve_host_memory_budget_bytes";
constexpr std::string_view kReceive = "exaserve_network_receive_bytes_total";
constexpr std::string_view kTransmit = "exaserve_network_transmit_bytes_total";
constexpr std::string_view kSpeed = "exaserve_network_speed_bytes";
constexpr std::string_view kLoadSeconds = "exaserve_replica_weight_load_seconds";
constexpr std::string_view kPullCount = "exaserve_weights_pull_seconds_count";
constexpr std::string_view kPullBucket = "exaserve_weights_pull_seconds_bucket";

// Slow loads remembered at most (one per replica and node); older ones go first.
constexpr size_t kMaxSlowLoads = 10000;

constexpr std::string_view kAlertNames[] = {"ExaServeReplicasShort", "ExaServeLatencyP99High",
                                            "ExaServeGpuMemoryHigh", "ExaServeNetworkSaturated",
                                            "ExaServeModelLoadSlow"};
constexpr std::string_view kDimensions[] = {"replica_health", "inference", "memory", "network",
                                            "storage"};

double ParseBound(std::string_view le) {
  if (le == "+Inf" || le == "Inf") return std::numeric_limits<double>::infinity();
  std::string s(le);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && !s.empty() ? v : std::numeric_limits<double>::quiet_NaN();
}

LabelSet Without(const LabelSet& labels, std::string_view name) {
  LabelSet out;
  for (const auto& l : labels) {
    if (l.first != name) out.push_back(l);
  }
  return out;
}

std::string Percent(double ratio) { return fmt::format("{:.0f} %", ratio * 100); }

// Counter increase across `points` from `since` on (resets count from zero, as Prometheus'
// increase()), and the time it spans; nullopt with fewer than two points.
std::optional<std::pair<double, absl::Duration>> Increase(const std::vector<absl::Time>& times,
                                                          const std::vector<double>& values) {
  if (values.size() < 2) return std::nullopt;
  double total = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    double d = values[i] - values[i - 1];
    total += d >= 0 ? d : values[i];
  }
  return std::make_pair(total, times.back() - times.front());
}

}  // namespace

std::string_view AlertStateName(AlertState state) {
  switch (state) {
    case AlertState::kPending:
      return "pending";
    case AlertState::kFiring:
      return "firing";
    case AlertState::kResolved:
      return "resolved";
  }
  return "unknown";
}

double HistogramQuantile(double q, const std::vector<std::pair<double, double>>& buckets) {
  if (buckets.size() < 2 || !std::isinf(buckets.back().first)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double total = buckets.back().second;
  if (total <= 0) return std::numeric_limits<double>::quiet_NaN();
  const double rank = std::clamp(q, 0.0, 1.0) * total;
  size_t b = 0;
  while (b < buckets.size() && buckets[b].second < rank) ++b;
  if (b >= buckets.size() - 1) return buckets[buckets.size() - 2].first;  // in the +Inf bucket
  double start = 0, below = 0;
  if (b > 0) {
    start = buckets[b - 1].first;
    below = buckets[b - 1].second;
  } else if (buckets[0].first <= 0) {
    return buckets[0].first;
  }
  const double in_bucket = buckets[b].second - below;
  if (in_bucket <= 0) return buckets[b].first;
  return start + (buckets[b].first - start) * (rank - below) / in_bucket;
}

AlertEvaluator::AlertEvaluator(AlertRulesConfig config)
    : config_(std::move(config)),
      look_back_(std::max(config_.latency_window, config_.network_window) +
                 2 * std::max({config_.replicas.interval, config_.latency.interval,
                               config_.gpu_memory.interval, config_.network.interval,
                               config_.model_load.interval})) {
  for (absl::Time& t : last_eval_) t = absl::InfinitePast();
}

bool AlertEvaluator::Wants(std::string_view name) const {
  static const std::set<std::string_view, std::less<>> kFixed = {
      kDesired,    kReady,   kGpuUsed,  kGpuTotal, kDeviceUsed,  kDeviceTotal, kResident,
      kHostBudget, kReceive, kTransmit, kSpeed,    kLoadSeconds, kPullCount,   kPullBucket};
  if (kFixed.count(name) > 0) return true;
  const std::string& h = config_.latency_histogram;
  return name.size() == h.size() + 7 && name.substr(0, h.size()) == h &&
         name.substr(h.size()) == "_bucket";
}

const RuleSettings& AlertEvaluator::Settings(Rule rule) const {
  switch (rule) {
    case kReplicas:
      return config_.replicas;
    case kLatency:
      return config_.latency;
    case kGpuMemory:
      return config_.gpu_memory;
    case kNetwork:
      return config_.network;
    default:
      return config_.model_load;
  }
}

void AlertEvaluator::Ingest(absl::Time now, const ScrapeTarget& target,
                            const std::vector<ParsedSample>& samples) {
  TargetState& t = targets_[target.instance];
  t.node = target.node;
  t.up = true;
  t.last_ok = now;
  t.last_attempt = now;
  for (const ParsedSample& sample : samples) {
    if (!Wants(sample.name)) continue;
    auto family = series_.find(sample.name);
    if (family == series_.end()) family = series_.emplace(sample.name, SeriesMap()).first;
    auto key = std::make_pair(target.instance, sample.labels);
    auto it = family->second.find(key);
    if (it == family->second.end()) {
      if (series_count_ >= config_.max_series) {
        ++series_dropped_;
        continue;
      }
      it = family->second.emplace(std::move(key), Series()).first;
      ++series_count_;
    }
    Series& s = it->second;
    if (!s.points.empty() && s.points.back().t >= now) {
      s.points.back().v = sample.value;  // the same sample twice in one scrape: the last wins
    } else {
      s.points.push_back({now, sample.value});
    }
    if (s.points.size() > std::max<size_t>(2, config_.history_samples)) {
      s.points.erase(s.points.begin());
    }
    s.last_seen = now;
  }
  DetectSlowLoads(now, target.instance);
}

void AlertEvaluator::ScrapeFailed(absl::Time now, const ScrapeTarget& target) {
  TargetState& t = targets_[target.instance];
  t.node = target.node;
  t.up = false;
  t.last_attempt = now;
}

bool AlertEvaluator::Unanswered(const Alert& alert) const {
  const std::string_view instance = LabelValue(alert.labels, "instance");
  if (instance.empty()) return false;
  auto t = targets_.find(std::string(instance));
  return t != targets_.end() && !t->second.up;
}

void AlertEvaluator::SetTargets(const std::vector<ScrapeTarget>& targets) {
  std::set<std::string_view> current;
  for (const ScrapeTarget& t : targets) current.insert(t.instance);
  for (auto& [instance, state] : targets_) {
    if (current.count(instance) == 0) state.up = false;
  }
}

const AlertEvaluator::SeriesMap* AlertEvaluator::Find(std::string_view name) const {
  auto it = series_.find(name);
  return it == series_.end() || it->second.empty() ? nullptr : &it->second;
}

std::optional<double> AlertEvaluator::Fresh(const std::string& instance, const Series& s) const {
  auto t = targets_.find(instance);
  if (t == targets_.end() || !t->second.up || s.last_seen != t->second.last_ok ||
      s.points.empty()) {
    return std::nullopt;
  }
  return s.points.back().v;
}

// Every load is an event (docs/architecture.md#monitoring-and-alerts "every load"): a replica's
// device load time that is new or changed (a restart), or weight pulls since the previous scrape
// that took longer than the threshold. The first scrape of a node is the baseline for its pull
// histogram.
void AlertEvaluator::DetectSlowLoads(absl::Time now, const std::string& instance) {
  const double threshold = config_.model_load.threshold;
  const std::string& node = targets_[instance].node;
  auto record = [&](LabelSet labels, double seconds) {
    std::sort(labels.begin(), labels.end());
    slow_loads_[std::move(labels)] = {now, seconds};
  };
  if (const SeriesMap* loads = Find(kLoadSeconds)) {
    for (auto it = loads->lower_bound({instance, {}}); it != loads->end(); ++it) {
      if (it->first.first != instance) break;
      const auto& points = it->second.points;
      if (it->second.last_seen != now || points.empty() || points.back().v <= threshold) continue;
      if (points.size() >= 2 && points[points.size() - 2].v == points.back().v) continue;
      LabelSet labels = it->first.second;
      labels.insert(labels.end(), {{"instance", instance}, {"node", node}, {"stage", "device"}});
      record(std::move(labels), points.back().v);
    }
  }
  const SeriesMap* counts = Find(kPullCount);
  const SeriesMap* buckets = Find(kPullBucket);
  if (counts == nullptr || buckets == nullptr) return;
  auto delta = [now](const Series& s) -> std::optional<double> {
    if (s.last_seen != now || s.points.size() < 2) return std::nullopt;
    double d = s.points.back().v - s.points[s.points.size() - 2].v;
    return d >= 0 ? d : s.points.back().v;
  };
  for (auto it = counts->lower_bound({instance, {}}); it != counts->end(); ++it) {
    if (it->first.first != instance) break;
    std::optional<double> pulls = delta(it->second);
    if (!pulls || *pulls <= 0) continue;
    // The bucket at the threshold, or the smallest above it (then a pull between the two is
    // not counted: choose a threshold that is a bucket bound).
    double bound = std::numeric_limits<double>::infinity();
    std::optional<double> fast;
    for (auto b = buckets->lower_bound({instance, {}}); b != buckets->end(); ++b) {
      if (b->first.first != instance) break;
      if (Without(b->first.second, "le") != it->first.second) continue;
      double le = ParseBound(LabelValue(b->first.second, "le"));
      if (std::isnan(le) || le < threshold || le >= bound) continue;
      if (std::optional<double> d = delta(b->second)) {
        bound = le;
        fast = d;
      }
    }
    if (!fast || *pulls - *fast <= 0) continue;
    LabelSet labels = it->first.second;
    labels.insert(labels.end(), {{"instance", instance}, {"node", node}, {"stage", "pull"}});
    record(std::move(labels), bound);
  }
}

std::optional<std::vector<AlertEvaluator::Candidate>> AlertEvaluator::Replicas() const {
  const SeriesMap* desired = Find(kDesired);
  if (desired == nullptr) return std::nullopt;
  // Every scheduler exports the same figures: the max over those that answered.
  std::map<std::string, double> want, ready;
  for (const auto& [key, s] : *desired) {
    if (std::optional<double> v = Fresh(key.first, s)) {
      double& w = want[std::string(LabelValue(key.second, "deployment"))];
      w = std::max(w, *v);
    }
  }
  if (want.empty()) return std::nullopt;
  if (const SeriesMap* r = Find(kReady)) {
    for (const auto& [key, s] : *r) {
      if (std::optional<double> v = Fresh(key.first, s)) {
        double& x = ready[std::string(LabelValue(key.second, "deployment"))];
        x = std::max(x, *v);
      }
    }
  }
  std::vector<Candidate> out;
  for (const auto& [deployment, d] : want) {
    if (d <= 0) continue;
    const double r = ready.count(deployment) > 0 ? ready[deployment] : 0;
    Candidate c;
    c.labels = {{"deployment", deployment}};
    c.value = r / d;
    c.active = c.value < config_.replicas.threshold;
    c.summary = StrCat("deployment ", deployment, ": ", static_cast<int64_t>(r), " of ",
                       static_cast<int64_t>(d), " replicas ready (", Percent(c.value),
                       ", threshold ", Percent(config_.replicas.threshold), ")");
    out.push_back(std::move(c));
  }
  return out;
}

std::optional<std::vector<AlertEvaluator::Candidate>> AlertEvaluator::Latency(
    absl::Time now) const {
  const SeriesMap* buckets = Find(config_.latency_histogram + "_bucket");
  if (buckets == nullptr) return std::nullopt;
  // Sum by le over every gateway of the increase within the window.
  std::map<double, double> sum;
  for (const auto& [key, s] : *buckets) {
    std::vector<absl::Time> times;
    std::vector<double> values;
    for (const Point& p : s.points) {
      if (p.t < now - config_.latency_window) continue;
      times.push_back(p.t);
      values.push_back(p.v);
    }
    auto inc = Increase(times, values);
    double le = ParseBound(LabelValue(key.second, "le"));
    if (!inc || std::isnan(le)) continue;
    sum[le] += inc->first;
  }
  if (sum.empty()) return std::nullopt;
  std::vector<std::pair<double, double>> cumulative;
  double running = 0;
  for (const auto& [le, count] : sum) {
    running = std::max(running, count);  // cumulative counts never decrease with le
    cumulative.emplace_back(le, running);
  }
  Candidate c;
  c.value = HistogramQuantile(config_.latency_quantile, cumulative);
  c.active = !std::isnan(c.value) && c.value > config_.latency.threshold;
  c.summary = fmt::format("P{:.0f} {} is {:.2f} s (threshold {:.2f} s) over the last {}",
                          config_.latency_quantile * 100, config_.latency_histogram, c.value,
                          config_.latency.threshold, absl::FormatDuration(config_.latency_window));
  return std::vector<Candidate>{c};
}

std::optional<std::vector<AlertEvaluator::Candidate>> AlertEvaluator::GpuMemory() const {
  std::vector<Candidate> out;
  bool any = false;
  std::set<std::pair<std::string, std::string>> measured;  // (instance, device) read off the device
  auto add = [&](const std::string& instance, std::string device, double used, double total,
                 std::string_view source) {
    any = true;
    Candidate c;
    c.labels = {{"device", device}, {"instance", instance}, {"node", targets_.at(instance).node}};
    c.value = used / total;
    c.active = c.value > config_.gpu_memory.threshold;
    c.summary = StrCat("node ", targets_.at(instance).node, " device ", device, ": ",
                       Percent(c.value), " of its memory used", source, " (threshold ",
                       Percent(config_.gpu_memory.threshold), ")");
    out.push_back(std::move(c));
  };
  // used / total per (instance, device) of two series; for the ledger's, the pairs already
  // read off the device are left out.
  auto each = [&](std::string_view used_name, std::string_view total_name, bool from_device) {
    const SeriesMap* used = Find(used_name);
    const SeriesMap* total = Find(total_name);
    if (used == nullptr || total == nullptr) return;
    for (const auto& [key, s] : *total) {
      std::string device(LabelValue(key.second, "device"));
      if (!from_device && measured.count({key.first, device}) > 0) continue;
      std::optional<double> t = Fresh(key.first, s);
      auto u = used->find(key);
      if (!t || *t <= 0 || u == used->end()) continue;
      if (std::optional<double> v = Fresh(key.first, u->second)) {
        if (from_device) measured.insert({key.first, device});
        add(key.first, device, *v, *t, from_device ? " (as the device reports it)" : " (promised)");
      }
    }
  };
  each(kDeviceUsed, kDeviceTotal, /*from_device=*/true);
  each(kGpuUsed, kGpuTotal, /*from_device=*/false);
  const SeriesMap* budget = Find(kHostBudget);
  const SeriesMap* resident = Find(kResident);
  if (budget != nullptr && resident != nullptr) {
    for (const auto& [key, s] : *budget) {
      std::optional<double> b = Fresh(key.first, s);
      auto r = resident->find({key.first, {}});
      if (!b || *b <= 0 || r == resident->end()) continue;
      if (std::optional<double> v = Fresh(key.first, r->second)) {
        add(key.first, "host", *v, *b, " (resident, of the host budget)");
      }
    }
  }
  if (!any) return std::nullopt;
  return out;
}

std::optional<std::vector<AlertEvaluator::Candidate>> AlertEvaluator::Network(
    absl::Time now) const {
  const SeriesMap* speed = Find(kSpeed);
  if (speed == nullptr) return std::nullopt;
  std::vector<Candidate> out;
  bool any = false;
  for (const auto& [key, s] : *speed) {
    std::optional<double> bytes_per_second = Fresh(key.first, s);
    if (!bytes_per_second || *bytes_per_second <= 0) continue;
    any = true;
    for (auto [direction, name] : {std::pair{"receive", kReceive}, {"transmit", kTransmit}}) {
      const SeriesMap* counter = Find(name);
      auto it = counter == nullptr ? SeriesMap::const_iterator() : counter->find(key);
      if (counter == nullptr || it == counter->end() || !Fresh(key.first, it->second)) continue;
      std::vector<absl::Time> times;
      std::vector<double> values;
      for (const Point& p : it->second.points) {
        if (p.t < now - config_.network_window) continue;
        times.push_back(p.t);
        values.push_back(p.v);
      }
      auto inc = Increase(times, values);
      if (!inc || inc->second <= absl::ZeroDuration()) continue;
      const std::string device(LabelValue(key.second, "device"));
      const std::string& node = targets_.at(key.first).node;
      Candidate c;
      c.labels = {
          {"device", device}, {"direction", direction}, {"instance", key.first}, {"node", node}};
      c.value = inc->first / absl::ToDoubleSeconds(inc->second) / *bytes_per_second;
      c.active = c.value > config_.network.threshold;
      c.summary = StrCat("node ", node, " NIC ", device, " ", direction, " at ", Percent(c.value),
                         " of its link (threshold ", Percent(config_.network.threshold), ")");
      out.push_back(std::move(c));
    }
  }
  if (!any) return std::nullopt;
  return out;
}

std::vector<AlertEvaluator::Candidate> AlertEvaluator::ModelLoads(absl::Time now) const {
  std::vector<Candidate> out;
  for (const auto& [labels, seen] : slow_loads_) {
    if (now - seen.first >= config_.model_load.for_duration) continue;
    Candidate c;
    c.labels = labels;
    c.value = seen.second;
    c.active = true;
    const std::string_view stage = LabelValue(labels, "stage");
    c.summary =
        fmt::format("node {}: {} took {}{:.1f} s (threshold {:.1f} s)", LabelValue(labels, "node"),
                    stage == "pull" ? std::string("a weight pull")
                                    : StrCat("loading replica ", LabelValue(labels, "replica")),
                    stage == "pull" ? "over " : "", seen.second, config_.model_load.threshold);
    out.push_back(std::move(c));
  }
  return out;
}

void AlertEvaluator::Apply(Rule rule, absl::Time now, const std::vector<Candidate>& candidates,
                           std::vector<Alert>* changed) {
  const RuleSettings& settings = Settings(rule);
  const std::string name(kAlertNames[rule]);
  // A slow load fires at once; its `for` is how long it stays firing (ModelLoads).
  const absl::Duration hold = rule == kModelLoad ? absl::ZeroDuration() : settings.for_duration;
  std::set<Key> seen;
  for (const Candidate& c : candidates) {
    if (!c.active) continue;
    LabelSet labels = c.labels;
    labels.insert(labels.end(), {{"alertname", name},
                                 {"dimension", std::string(kDimensions[rule])},
                                 {"severity", settings.severity}});
    std::sort(labels.begin(), labels.end());
    Key key{name, labels};
    seen.insert(key);
    auto [it, inserted] = active_.try_emplace(key);
    Alert& a = it->second;
    if (inserted) {
      a.name = name;
      a.severity = settings.severity;
      a.labels = std::move(labels);
      a.active_since = now;
    }
    a.value = c.value;
    a.threshold = settings.threshold;
    a.summary = c.summary;
    if (a.state == AlertState::kPending && now - a.active_since >= hold) {
      a.state = AlertState::kFiring;
      a.fired_at = now;
      changed->push_back(a);
    }
  }
  for (auto it = active_.begin(); it != active_.end();) {
    if (it->first.first != name || seen.count(it->first) > 0 || Unanswered(it->second)) {
      ++it;
      continue;
    }
    if (it->second.state == AlertState::kFiring) {
      Alert a = it->second;
      a.state = AlertState::kResolved;
      a.resolved_at = now;
      changed->push_back(a);
      resolved_.push_back(std::move(a));
    }
    it = active_.erase(it);
  }
}

std::vector<Alert> AlertEvaluator::Evaluate(absl::Time now) {
  std::vector<Alert> changed;
  for (int r = 0; r < kRuleCount; ++r) {
    const Rule rule = static_cast<Rule>(r);
    // A tenth of the interval early still counts as due: scrape rounds jitter.
    const absl::Duration interval = Settings(rule).interval;
    if (last_eval_[r] != absl::InfinitePast() && now - last_eval_[r] < interval - interval / 10) {
      continue;
    }
    last_eval_[r] = now;
    std::optional<std::vector<Candidate>> found;
    switch (rule) {
      case kReplicas:
        found = Replicas();
        break;
      case kLatency:
        found = Latency(now);
        break;
      case kGpuMemory:
        found = GpuMemory();
        break;
      case kNetwork:
        found = Network(now);
        break;
      default:
        found = ModelLoads(now);
        break;
    }
    if (found) Apply(rule, now, *found, &changed);  // no data: hold (silence is not recovery)
  }
  Forget(now);
  return changed;
}

void AlertEvaluator::Forget(absl::Time now) {
  const absl::Time horizon = now - look_back_;
  for (auto family = series_.begin(); family != series_.end();) {
    for (auto it = family->second.begin(); it != family->second.end();) {
      auto& points = it->second.points;
      if (it->second.last_seen < horizon) {
        it = family->second.erase(it);
        --series_count_;
        continue;
      }
      auto keep = std::find_if(points.begin(), points.end(),
                               [horizon](const Point& p) { return p.t >= horizon; });
      points.erase(points.begin(), keep);
      ++it;
    }
    family = family->second.empty() ? series_.erase(family) : std::next(family);
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    it = it->second.last_attempt < horizon ? targets_.erase(it) : std::next(it);
  }
  for (auto it = slow_loads_.begin(); it != slow_loads_.end();) {
    it = now - it->second.first >= config_.model_load.for_duration + config_.model_load.interval
             ? slow_loads_.erase(it)
             : std::next(it);
  }
  while (slow_loads_.size() > kMaxSlowLoads) {
    auto oldest = std::min_element(slow_loads_.begin(), slow_loads_.end(), [](auto& a, auto& b) {
      return a.second.first < b.second.first;
    });
    slow_loads_.erase(oldest);
  }
  auto expired = std::find_if(resolved_.begin(), resolved_.end(), [&](const Alert& a) {
    return now - a.resolved_at < config_.resolved_retention;
  });
  resolved_.erase(resolved_.begin(), expired);
  if (resolved_.size() > config_.max_resolved) {
    resolved_.erase(resolved_.begin(), resolved_.end() - config_.max_resolved);
  }
}

std::vector<Alert> AlertEvaluator::Alerts() const {
  std::vector<Alert> out;
  for (const auto& [key, a] : active_) out.push_back(a);
  std::sort(out.begin(), out.end(), [](const Alert& a, const Alert& b) {
    return std::tie(b.state, a.severity, a.name, a.labels) <
           std::tie(a.state, b.severity, b.name, b.labels);
  });
  for (auto it = resolved_.rbegin(); it != resolved_.rend(); ++it) out.push_back(*it);
  return out;
}

AlertEvaluator::Stats AlertEvaluator::stats() const {
  Stats s;
  s.targets = targets_.size();
  for (const auto& [instance, t] : targets_) s.targets_up += t.up ? 1 : 0;
  s.series = series_count_;
  for (const auto& [name, family] : series_) {
    for (const auto& [key, series] : family) s.points += series.points.size();
  }
  s.series_dropped = series_dropped_;
  return s;
}

}  // namespace exa::metrics
