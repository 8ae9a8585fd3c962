// The observer role's settings (docs/architecture.md#monitoring-and-alerts), apart from the role
// itself (observer_role.h): the daemon's options (options.h) register them without depending on
// the role's implementation (docs/architecture.md#dependencies).
#pragma once

#include <string>

#include "absl/time/time.h"
#include "config/schema.h"

namespace exa::daemon {

// The observer role (observer_role.h): scrapes every member's /metrics and evaluates the
// alert rules of docs/architecture.md#monitoring-and-alerts; the defaults are that table's.
struct ObserverOptions {
  // The shortest sampling interval of the table (replica health, 10 s).
  absl::Duration scrape_interval = absl::Seconds(10);
  absl::Duration scrape_timeout = absl::Seconds(5);  // at most scrape_interval is used
  int scrape_concurrency = 32;
  config::Bytes scrape_max_bytes{16 << 20};
  int history_samples = 64;
  int max_series = 100000;
  double replicas_threshold = 0.95;
  absl::Duration replicas_for = absl::Minutes(5);
  absl::Duration replicas_interval = absl::Seconds(10);
  std::string replicas_severity = "P0";
  absl::Duration latency_threshold = absl::Seconds(2);
  absl::Duration latency_for = absl::Minutes(3);
  absl::Duration latency_interval = absl::Seconds(30);
  std::string latency_severity = "P1";
  absl::Duration latency_window = absl::Minutes(2);
  std::string latency_histogram = "exaserve_gateway_ttft_seconds";
  double latency_quantile = 0.99;
  double gpu_memory_threshold = 0.9;
  absl::Duration gpu_memory_for = absl::Minutes(10);
  absl::Duration gpu_memory_interval = absl::Seconds(30);
  std::string gpu_memory_severity = "P2";
  double network_threshold = 0.8;
  absl::Duration network_for = absl::Minutes(5);
  absl::Duration network_interval = absl::Minutes(1);
  absl::Duration network_window = absl::Minutes(2);
  std::string network_severity = "P2";
  absl::Duration model_load_threshold = absl::Seconds(30);
  absl::Duration model_load_keep = absl::Minutes(5);
  absl::Duration model_load_interval = absl::Seconds(10);
  std::string model_load_severity = "P2";
  absl::Duration resolved_retention = absl::Hours(1);
  int max_resolved = 100;
  std::string webhook_url;  // http://host[:port]/path; empty: no webhook
  // Prometheus file_sd of every live member, rewritten (atomically) when the set changes;
  // empty: <data_dir>/observer/targets.json. write_file_sd false: not written.
  std::string file_sd_path;
  bool write_file_sd = true;
  absl::Duration webhook_timeout = absl::Seconds(5);
  int webhook_queue = 256;
};

void RegisterObserverConfig(config::Schema& schema, ObserverOptions* options);

}  // namespace exa::daemon
