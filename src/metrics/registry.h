// Prometheus metrics: counters, gauges and histograms with labels, and the text exposition
// format 0.0.4 served at /metrics (docs/architecture.md#monitoring-and-alerts).
//
//   auto& requests = registry.AddCounter("exaserve_http_requests_total", "HTTP requests",
//                                        {"path", "code"});
//   requests.WithLabels({"/v1/completions", "200"}).Increment();
//
// Thread safety: every method may be called from any thread. Updating a metric is lock-free;
// WithLabels() takes a per-family lock the first time a label set is seen, so hot paths should
// keep the returned reference (it stays valid for the registry's lifetime).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace exa::metrics {

class Counter {
 public:
  void Increment(double delta = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds` are the upper bounds of the buckets, strictly increasing; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

// Default latency buckets in seconds, from 1 ms to 60 s.
std::vector<double> LatencyBucketsSeconds();

// One metric name with a fixed list of label names; each distinct label-value list is a series.
template <typename Metric>
class Family {
 public:
  // The series for `values` (one per label name). Past kMaxSeries distinct series, further label
  // sets share one series whose values are all "_overflow_", so a flood of distinct values
  // cannot grow memory without bound.
  Metric& WithLabels(const std::vector<std::string>& values);

  static constexpr size_t kMaxSeries = 10000;

 private:
  friend class Registry;
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<Metric>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}

  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<Metric>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]* and be registered once: both are programming
  // errors, checked.
  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(std::string name, std::string help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> label_names, std::vector<double> bounds);
  // A gauge whose value is read when metrics are exposed.
  void AddGaugeCallback(std::string name, std::string help, std::function<double()> read);
  // A counter read from elsewhere (e.g. the kernel's CPU time) when metrics are exposed.
  void AddCounterCallback(std::string name, std::string help, std::function<double()> read);
  // A family whose series are read when metrics are exposed, for label sets that come and go
  // (network interfaces, alerts). `type` is "gauge" or "counter". `collect` runs under the
  // registry's lock: it must not call back into the registry.
  struct Collected {
    std::vector<std::pair<std::string, std::string>> labels;
    double value = 0;
  };
  void AddCollector(std::string name, std::string help, std::string type,
                    std::function<std::vector<Collected>()> collect);

  // Unlabelled shorthands.
  Counter& SimpleCounter(std::string name, std::string help);
  Gauge& SimpleGauge(std::string name, std::string help);

  // The text exposition format, version 0.0.4.
  std::string Expose() const;

 private:
  struct Entry;
  Entry& AddEntry(std::string name, std::string help, std::string type);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

// Registers process metrics (start time, uptime, CPU, resident and virtual memory, open and
// maximum fds) and exaserve_build_info{version=...} = 1.
void RegisterProcessMetrics(Registry& registry, std::string_view version);

// Escapes a label value for the exposition format (backslash, double quote, newline).
std::string EscapeLabelValue(std::string_view value);

}  // namespace exa::metrics
