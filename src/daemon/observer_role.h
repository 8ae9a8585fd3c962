// The observer role (docs/architecture.md#roles "observer nodes",
// docs/architecture.md#monitoring-and-alerts): every scrape interval, GET /metrics from every live
// member (addresses from membership: the host of its gossip address, the HTTP port in its metadata)
// with a deadline and bounded concurrency; feed the alert-rule core (metrics/alert_rules.h); log
// alerts that fire or resolve; expose them as Prometheus-style
// ALERTS{alertname,alertstate,severity,...} gauges on this node's /metrics; answer the Admin
// Alerts RPC; and, with observer.webhook_url, POST each change in the Alertmanager webhook
// format (a bounded queue: notifications beyond it are dropped and counted).
//
// A round whose scrapes outlast the interval delays the next one instead of overlapping it.
//
// Thread safety: Start and Stop from one thread at a time (the daemon's main thread, or its
// election timer for an elected observer); FillAlerts from any thread. Scrape
// and webhook completions run on the io threads; all state is behind one mutex, and in-flight
// work holds the state alive, so Stop need not wait for it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "daemon/observer_options.h"
#include "exaserve/v1/admin.pb.h"
#include "membership/member.h"
#include "metrics/alert_rules.h"
#include "metrics/registry.h"
#include "net/io_runner.h"

namespace exa::daemon {

// The rule core's settings from the daemon's observer options.
metrics::AlertRulesConfig RulesConfig(const ObserverOptions& options);

// The members to scrape: alive or suspect (a suspect may still answer), advertising an HTTP
// port; the instance is "host:http_port" with the host of the member's gossip address.
std::vector<metrics::ScrapeTarget> ScrapeTargets(const std::vector<membership::Member>& members);

// Prometheus file_sd: one entry per target with node, rack and roles labels (`roles`, not
// `role`, which would clash with exaserve_node_role{role}). Pure; exposed for tests.
std::string FileSdJson(const std::vector<metrics::ScrapeTarget>& targets);

// One Alertmanager webhook message (version 4) for `alerts` of one alertname: status "firing"
// when any of them fires, else "resolved". Pure; exposed for tests.
std::string AlertmanagerWebhookJson(const std::vector<metrics::Alert>& alerts,
                                    std::string_view external_url);

class ObserverRole {
 public:
  using Targets = std::function<std::vector<metrics::ScrapeTarget>()>;

  ObserverRole(const ObserverOptions& options, std::string node_id, std::string external_url,
               net::IoRunner& io, metrics::Registry& registry, Targets targets,
               Clock& clock = SystemClock::Get());
  ~ObserverRole();
  ObserverRole(const ObserverRole&) = delete;
  ObserverRole& operator=(const ObserverRole&) = delete;

  // Checks observer.webhook_url and arms the first scrape round (it runs once the io threads do).
  // After Stop it starts again (an elected observer re-elected); while running, a no-op.
  absl::Status Start();
  // No new rounds or notifications; what is in flight finishes or is dropped with the io threads.
  void Stop();
  bool running() const;
  void FillAlerts(exaserve::v1::AlertsResponse* response) const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace exa::daemon
