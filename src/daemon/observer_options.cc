#include "daemon/observer_options.h"

#include "common/status.h"
#include "common/strings.h"
#include "net/http_client.h"

namespace exa::daemon {
namespace {

std::string Positive(const absl::Duration& d) {
  return d > absl::ZeroDuration() ? "" : "must be positive";
}
std::string NotNegative(const absl::Duration& d) {
  return d >= absl::ZeroDuration() ? "" : "must not be negative";
}
std::string Ratio(const double& v) {
  return v > 0 && v <= 1 ? "" : StrCat(v, ": expected a ratio above 0, at most 1 (0.95 = 95 %)");
}
std::string AtLeastOne(const int& v) { return v >= 1 ? "" : StrCat(v, ": must be at least 1"); }
std::string Severity(const std::string& v) { return v.empty() ? "must not be empty" : ""; }

}  // namespace

void RegisterObserverConfig(config::Schema& s, ObserverOptions* o) {
  s.Add<absl::Duration>("observer.scrape_interval", &o->scrape_interval,
                        "how often an observer scrapes every member's /metrics", Positive);
  s.Add<absl::Duration>("observer.scrape_timeout", &o->scrape_timeout,
                        "deadline of one scrape (at most scrape_interval is used)", Positive);
  s.Add<int>("observer.scrape_concurrency", &o->scrape_concurrency, "scrapes in flight at once",
             AtLeastOne);
  s.Add("observer.scrape_max_bytes", &o->scrape_max_bytes,
        "largest /metrics body read from one member",
        config::Validator<config::Bytes>(config::PositiveBytes));
  s.Add<int>("observer.history_samples", &o->history_samples,
             "samples kept per series (the rules look back at most a few minutes)", AtLeastOne);
  s.Add<int>("observer.max_series", &o->max_series,
             "series kept in all; further ones are dropped and counted", AtLeastOne);
  s.Add<double>("observer.replicas_threshold", &o->replicas_threshold,
                "replica alert: ready / desired below this ratio", Ratio);
  s.Add<absl::Duration>("observer.replicas_for", &o->replicas_for,
                        "replica alert: fires after the ratio stayed below this long", NotNegative);
  s.Add<absl::Duration>("observer.replicas_interval", &o->replicas_interval,
                        "replica alert: evaluated this often", Positive);
  s.Add<std::string>("observer.replicas_severity", &o->replicas_severity,
                     "replica alert: severity label", Severity);
  s.Add<absl::Duration>("observer.latency_threshold", &o->latency_threshold,
                        "latency alert: the quantile of latency_histogram above this", Positive);
  s.Add<absl::Duration>("observer.latency_for", &o->latency_for,
                        "latency alert: fires after it stayed above this long", NotNegative);
  s.Add<absl::Duration>("observer.latency_interval", &o->latency_interval,
                        "latency alert: evaluated this often", Positive);
  s.Add<std::string>("observer.latency_severity", &o->latency_severity,
                     "latency alert: severity label", Severity);
  s.Add<absl::Duration>("observer.latency_window", &o->latency_window,
                        "latency alert: the quantile of the requests in this window", Positive);
  s.Add<std::string>("observer.latency_histogram", &o->latency_histogram,
                     "latency alert: the gateway histogram summed over gateways",
                     [](const std::string& v) { return v.empty() ? "must not be empty" : ""; });
  s.Add<double>("observer.latency_quantile", &o->latency_quantile,
                "latency alert: the quantile (0.99 = P99)", Ratio);
  s.Add<double>("observer.gpu_memory_threshold", &o->gpu_memory_threshold,
                "memory alert: used / total above this ratio, per GPU (CPU nodes: RSS / budget)",
                Ratio);
  s.Add<absl::Duration>("observer.gpu_memory_for", &o->gpu_memory_for,
                        "memory alert: fires after it stayed above this long", NotNegative);
  s.Add<absl::Duration>("observer.gpu_memory_interval", &o->gpu_memory_interval,
                        "memory alert: evaluated this often", Positive);
  s.Add<std::string>("observer.gpu_memory_severity", &o->gpu_memory_severity,
                     "memory alert: severity label", Severity);
  s.Add<double>("observer.network_threshold", &o->network_threshold,
                "network alert: a NIC's receive or transmit rate / link speed above this", Ratio);
  s.Add<absl::Duration>("observer.network_for", &o->network_for,
                        "network alert: fires after it stayed above this long", NotNegative);
  s.Add<absl::Duration>("observer.network_interval", &o->network_interval,
                        "network alert: evaluated this often", Positive);
  s.Add<absl::Duration>("observer.network_window", &o->network_window,
                        "network alert: rates over this window", Positive);
  s.Add<std::string>("observer.network_severity", &o->network_severity,
                     "network alert: severity label", Severity);
  s.Add<absl::Duration>("observer.model_load_threshold", &o->model_load_threshold,
                        "model load alert: a load (weight pull or device load) longer than this",
                        Positive);
  s.Add<absl::Duration>("observer.model_load_keep", &o->model_load_keep,
                        "model load alert: stays firing this long after the slow load", Positive);
  s.Add<absl::Duration>("observer.model_load_interval", &o->model_load_interval,
                        "model load alert: evaluated this often", Positive);
  s.Add<std::string>("observer.model_load_severity", &o->model_load_severity,
                     "model load alert: severity label", Severity);
  s.Add<absl::Duration>("observer.resolved_retention", &o->resolved_retention,
                        "resolved alerts stay listed this long", NotNegative);
  s.Add<int>("observer.max_resolved", &o->max_resolved, "resolved alerts listed at most",
             [](const int& v) { return v >= 0 ? "" : StrCat(v, ": must not be negative"); });
  s.Add<std::string>("observer.webhook_url", &o->webhook_url,
                     "http://host[:port]/path receiving Alertmanager webhook JSON; empty: none",
                     [](const std::string& v) {
                       if (v.empty()) return std::string();
                       net::HttpClientRequest r;
                       absl::Status st = net::ParseHttpUrl(v, &r);
                       return st.ok() ? std::string() : std::string(ToStd(st.message()));
                     });
  s.Add<absl::Duration>("observer.webhook_timeout", &o->webhook_timeout,
                        "deadline of one webhook POST", Positive);
  s.Add<int>("observer.webhook_queue", &o->webhook_queue,
             "webhook messages waiting at most; further ones are dropped and counted", AtLeastOne);
  s.Add("observer.file_sd_path", &o->file_sd_path,
        "Prometheus file_sd targets file (every live member); empty: "
        "<data_dir>/observer/targets.json");
  s.Add("observer.write_file_sd", &o->write_file_sd,
        "write file_sd_path when the member set changes");
}

}  // namespace exa::daemon
