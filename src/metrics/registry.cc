#include "metrics/registry.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <variant>

#include "absl/time/clock.h"
#include "common/check.h"
#include "common/strings.h"

namespace exa::metrics {
namespace {

void AtomicAdd(std::atomic<double>& target, double delta) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return StrCat(static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out.append("\\\\");
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// `{a="x",b="y"}` (with `extra` appended, e.g. le="0.5"), or "" when there are no labels.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     std::string_view extra = "") {
  if (names.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    StrAppend(&out, i ? "," : "", names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra.empty()) StrAppend(&out, names.empty() ? "" : ",", extra);
  out.push_back('}');
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void Counter::Increment(double delta) {
  EXA_DCHECK(delta >= 0) << "counters only go up";
  AtomicAdd(value_, delta);
}

void Gauge::Add(double delta) { AtomicAdd(value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i + 1 < bounds_.size(); ++i) {
    EXA_CHECK(bounds_[i] < bounds_[i + 1]) << "histogram bounds must increase";
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i] = 0;
}

void Histogram::Observe(double value) {
  size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative_counts.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> LatencyBucketsSeconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10, 30, 60};
}

template <typename Metric>
Metric& Family<Metric>::WithLabels(const std::vector<std::string>& values) {
  EXA_CHECK(values.size() == label_names_.size())
      << "expected " << label_names_.size() << " label values, got " << values.size();
  absl::MutexLock lock(&mu_);
  auto it = series_.find(values);
  if (it != series_.end()) return *it->second;
  std::vector<std::string> key = values;
  if (series_.size() >= kMaxSeries) key.assign(values.size(), "_overflow_");
  auto& slot = series_[key];
  if (!slot) slot = make_();
  return *slot;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

struct Registry::Entry {
  std::string name;
  std::string help;
  std::string type;
  std::unique_ptr<Family<Counter>> counters;
  std::unique_ptr<Family<Gauge>> gauges;
  std::unique_ptr<Family<Histogram>> histograms;
  std::function<double()> callback;
  std::function<std::vector<Registry::Collected>()> collect;
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry::Entry& Registry::AddEntry(std::string name, std::string help, std::string type) {
  EXA_CHECK(ValidName(name)) << "invalid metric name \"" << name << "\"";
  absl::MutexLock lock(&mu_);
  for (const auto& e : entries_) EXA_CHECK(e->name != name) << "metric registered twice: " << name;
  auto entry = std::make_unique<Entry>();
  entry->name = std::move(name);
  entry->help = std::move(help);
  entry->type = std::move(type);
  entries_.push_back(std::move(entry));
  return *entries_.back();
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> label_names) {
  Entry& e = AddEntry(std::move(name), std::move(help), "counter");
  e.counters.reset(new Family<metrics::Counter>(
      std::move(label_names), [] { return std::make_unique<metrics::Counter>(); }));
  return *e.counters;
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> label_names) {
  Entry& e = AddEntry(std::move(name), std::move(help), "gauge");
  e.gauges.reset(new Family<metrics::Gauge>(std::move(label_names),
                                            [] { return std::make_unique<metrics::Gauge>(); }));
  return *e.gauges;
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> bounds) {
  Entry& e = AddEntry(std::move(name), std::move(help), "histogram");
  e.histograms.reset(new Family<metrics::Histogram>(
      std::move(label_names), [bounds] { return std::make_unique<metrics::Histogram>(bounds); }));
  return *e.histograms;
}

void Registry::AddGaugeCallback(std::string name, std::string help, std::function<double()> read) {
  Entry& e = AddEntry(std::move(name), std::move(help), "gauge");
  e.callback = std::move(read);
}

void Registry::AddCounterCallback(std::string name, std::string help,
                                  std::function<double()> read) {
  Entry& e = AddEntry(std::move(name), std::move(help), "counter");
  e.callback = std::move(read);
}

void Registry::AddCollector(std::string name, std::string help, std::string type,
                            std::function<std::vector<Collected>()> collect) {
  EXA_CHECK(type == "gauge" || type == "counter") << "collector type " << type;
  Entry& e = AddEntry(std::move(name), std::move(help), std::move(type));
  e.collect = std::move(collect);
}

Counter& Registry::SimpleCounter(std::string name, std::string help) {
  return AddCounter(std::move(name), std::move(help)).WithLabels({});
}

Gauge& Registry::SimpleGauge(std::string name, std::string help) {
  return AddGauge(std::move(name), std::move(help)).WithLabels({});
}

std::string Registry::Expose() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& e : entries_) {
    StrAppend(&out, "# HELP ", e->name, " ", EscapeHelp(e->help), "\n# TYPE ", e->name, " ",
              e->type, "\n");
    if (e->callback) {
      StrAppend(&out, e->name, " ", FormatValue(e->callback()), "\n");
    } else if (e->collect) {
      for (const Collected& c : e->collect()) {
        std::string labels;
        for (const auto& [k, v] : c.labels) {
          StrAppend(&labels, labels.empty() ? "{" : ",", k, "=\"", EscapeLabelValue(v), "\"");
        }
        if (!labels.empty()) labels.push_back('}');
        StrAppend(&out, e->name, labels, " ", FormatValue(c.value), "\n");
      }
    } else if (e->counters) {
      absl::MutexLock family_lock(&e->counters->mu_);
      for (const auto& [values, c] : e->counters->series_) {
        StrAppend(&out, e->name, LabelSet(e->counters->label_names_, values), " ",
                  FormatValue(c->Value()), "\n");
      }
    } else if (e->gauges) {
      absl::MutexLock family_lock(&e->gauges->mu_);
      for (const auto& [values, g] : e->gauges->series_) {
        StrAppend(&out, e->name, LabelSet(e->gauges->label_names_, values), " ",
                  FormatValue(g->Value()), "\n");
      }
    } else if (e->histograms) {
      absl::MutexLock family_lock(&e->histograms->mu_);
      const auto& names = e->histograms->label_names_;
      for (const auto& [values, h] : e->histograms->series_) {
        Histogram::Snapshot s = h->Read();
        for (size_t i = 0; i <= s.bounds.size(); ++i) {
          std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
          StrAppend(&out, e->name, "_bucket", LabelSet(names, values, StrCat("le=\"", le, "\"")),
                    " ", s.cumulative_counts[i], "\n");
        }
        StrAppend(&out, e->name, "_sum", LabelSet(names, values), " ", FormatValue(s.sum), "\n");
        StrAppend(&out, e->name, "_count", LabelSet(names, values), " ", s.count, "\n");
      }
    }
  }
  return out;
}

namespace {

// Fields of /proc/self/stat after the command name: utime and stime are the 12th and 13th,
// vsize the 21st, rss (pages) the 22nd, counting from the state field.
struct ProcStat {
  double cpu_seconds = 0;
  double virtual_bytes = 0;
  double resident_bytes = 0;
};

ProcStat ReadProcStat() {
  ProcStat s;
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return s;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return s;
  std::vector<std::string> fields;
  std::string_view rest = std::string_view(line).substr(close + 2);
  while (!rest.empty()) {
    size_t sp = rest.find(' ');
    fields.emplace_back(rest.substr(0, sp));
    if (sp == std::string_view::npos) break;
    rest = rest.substr(sp + 1);
  }
  if (fields.size() < 22) return s;
  double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_seconds = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
  s.virtual_bytes = std::stod(fields[20]);
  s.resident_bytes = std::stod(fields[21]) * static_cast<double>(sysconf(_SC_PAGESIZE));
  return s;
}

double CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (dirent* d = readdir(dir)) {
    if (d->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory stream's own fd
}

}  // namespace

void RegisterProcessMetrics(Registry& registry, std::string_view version) {
  double start = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  registry.AddGaugeCallback("process_start_time_seconds",
                            "Start time of the process since unix epoch in seconds.",
                            [start] { return start; });
  registry.AddGaugeCallback("exaserve_uptime_seconds", "Seconds since exaserved started.", [start] {
    return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - start;
  });
  registry.AddCounterCallback("process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.",
                              [] { return ReadProcStat().cpu_seconds; });
  registry.AddGaugeCallback("process_resident_memory_bytes", "Resident memory size in bytes.",
                            [] { return ReadProcStat().resident_bytes; });
  registry.AddGaugeCallback("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                            [] { return ReadProcStat().virtual_bytes; });
  registry.AddGaugeCallback("process_open_fds", "Number of open file descriptors.",
                            [] { return CountOpenFds(); });
  registry.AddGaugeCallback("process_max_fds", "Maximum number of open file descriptors.", [] {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    return static_cast<double>(limit.rlim_cur);
  });
  registry.AddGauge("exaserve_build_info", "Build information; the value is always 1.", {"version"})
      .WithLabels({std::string(version)})
      .Set(1);
}

}  // namespace exa::metrics
