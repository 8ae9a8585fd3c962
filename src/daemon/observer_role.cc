#include "daemon/observer_role.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/strings.h"
#include "net/http_client.h"
#include "nlohmann/json.hpp"

namespace exa::daemon {
namespace {

namespace asio = boost::asio;
using metrics::Alert;
using metrics::AlertState;

// A webhook that fails is tried this many times, a second apart, before the message is dropped
// (and counted): enough for a receiver that restarts, bounded for one that is gone.
constexpr int kWebhookAttempts = 3;

std::string RulesText(const metrics::LabelSet& labels) {
  std::string out;
  for (const auto& [k, v] : labels) StrAppend(&out, out.empty() ? "" : ",", k, "=", v);
  return out;
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

// FNV-1a 64 over the label set: a stable id for one alert (Alertmanager's fingerprint).
std::string Fingerprint(const metrics::LabelSet& labels) {
  uint64_t h = 14695981039346656037ull;
  for (const auto& [k, v] : labels) {
    for (std::string_view part : {std::string_view(k), std::string_view("\xff"),
                                  std::string_view(v), std::string_view("\xff")}) {
      for (char c : part) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ull;
      }
    }
  }
  return fmt::format("{:016x}", h);
}

int64_t UnixMillis(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t); }

}  // namespace

metrics::AlertRulesConfig RulesConfig(const ObserverOptions& o) {
  metrics::AlertRulesConfig c;
  c.replicas = {o.replicas_threshold, o.replicas_for, o.replicas_interval, o.replicas_severity};
  c.latency = {absl::ToDoubleSeconds(o.latency_threshold), o.latency_for, o.latency_interval,
               o.latency_severity};
  c.gpu_memory = {o.gpu_memory_threshold, o.gpu_memory_for, o.gpu_memory_interval,
                  o.gpu_memory_severity};
  c.network = {o.network_threshold, o.network_for, o.network_interval, o.network_severity};
  c.model_load = {absl::ToDoubleSeconds(o.model_load_threshold), o.model_load_keep,
                  o.model_load_interval, o.model_load_severity};
  c.latency_histogram = o.latency_histogram;
  c.latency_quantile = o.latency_quantile;
  c.latency_window = o.latency_window;
  c.network_window = o.network_window;
  c.history_samples = static_cast<size_t>(o.history_samples);
  c.max_series = static_cast<size_t>(o.max_series);
  c.max_resolved = static_cast<size_t>(o.max_resolved);
  c.resolved_retention = o.resolved_retention;
  return c;
}

std::vector<metrics::ScrapeTarget> ScrapeTargets(const std::vector<membership::Member>& members) {
  std::vector<metrics::ScrapeTarget> out;
  for (const membership::Member& m : members) {
    const bool live =
        m.state == membership::MemberState::kAlive || m.state == membership::MemberState::kSuspect;
    if (!live || m.metadata.http_port == 0) continue;
    std::string roles;
    for (const std::string& r : m.metadata.roles) StrAppend(&roles, roles.empty() ? "" : ",", r);
    out.push_back({StrCat(membership::AddressHost(m.address), ":", m.metadata.http_port), m.id,
                   m.metadata.rack, roles});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.instance < b.instance; });
  return out;
}

std::string FileSdJson(const std::vector<metrics::ScrapeTarget>& targets) {
  nlohmann::json out = nlohmann::json::array();
  for (const metrics::ScrapeTarget& t : targets) {
    nlohmann::json labels = {{"node", t.node}};
    if (!t.rack.empty()) labels["rack"] = t.rack;
    if (!t.roles.empty()) labels["roles"] = t.roles;
    out.push_back({{"targets", {t.instance}}, {"labels", labels}});
  }
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string AlertmanagerWebhookJson(const std::vector<Alert>& alerts,
                                    std::string_view external_url) {
  using nlohmann::json;
  bool firing = false;
  json list = json::array();
  std::map<std::string, std::string> common;
  bool first = true;
  for (const Alert& a : alerts) {
    firing = firing || a.state == AlertState::kFiring;
    std::map<std::string, std::string> labels(a.labels.begin(), a.labels.end());
    if (first) {
      common = labels;
      first = false;
    } else {
      for (auto it = common.begin(); it != common.end();) {
        auto l = labels.find(it->first);
        it = l == labels.end() || l->second != it->second ? common.erase(it) : std::next(it);
      }
    }
    const bool resolved = a.state == AlertState::kResolved;
    list.push_back({{"status", resolved ? "resolved" : "firing"},
                    {"labels", labels},
                    {"annotations", {{"summary", a.summary}}},
                    {"startsAt", Rfc3339(a.fired_at)},
                    // Alertmanager's "no end yet" for an alert that still fires.
                    {"endsAt", resolved ? Rfc3339(a.resolved_at) : "0001-01-01T00:00:00Z"},
                    {"generatorURL", std::string(external_url)},
                    {"fingerprint", Fingerprint(a.labels)}});
  }
  const std::string name = alerts.empty() ? std::string() : alerts.front().name;
  json message = {{"version", "4"},
                  {"groupKey", StrCat("{}:{alertname=\"", name, "\"}")},
                  {"truncatedAlerts", 0},
                  {"status", firing ? "firing" : "resolved"},
                  {"receiver", "exaserve-observer"},
                  {"groupLabels", {{"alertname", name}}},
                  {"commonLabels", common},
                  {"commonAnnotations", json::object()},
                  {"externalURL", std::string(external_url)},
                  {"alerts", list}};
  return message.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct ObserverRole::Impl : std::enable_shared_from_this<Impl> {
  Impl(const ObserverOptions& o, std::string node, std::string url, net::IoRunner& runner,
       Targets find, Clock& c)
      : options(o),
        node_id(std::move(node)),
        external_url(std::move(url)),
        io(runner),
        clock(c),
        targets(std::move(find)),
        timeout(std::min(o.scrape_timeout, o.scrape_interval)),
        filter(RulesConfig(o)),
        timer(runner.context()),
        webhook_timer(runner.context()),
        eval(RulesConfig(o)) {}

  void Register(metrics::Registry& r);
  void Arm(absl::Duration delay) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // `timer`: called by the round timer (which it re-arms), else a round that was due.
  void StartRound(bool timer);
  std::vector<metrics::ScrapeTarget> TakeLaunchesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Launch(const std::vector<metrics::ScrapeTarget>& launch);
  void OnScrape(const metrics::ScrapeTarget& target,
                absl::StatusOr<net::HttpClientResponse> result);
  void Announce(const std::vector<Alert>& changed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void PumpWebhook();
  void OnWebhook(const absl::StatusOr<net::HttpClientResponse>& result);

  const ObserverOptions options;
  const std::string node_id;
  const std::string external_url;
  net::IoRunner& io;
  Clock& clock;
  const Targets targets;
  const absl::Duration timeout;
  const metrics::AlertEvaluator filter;  // only Wants(): immutable, read without the lock
  net::HttpClientRequest webhook;        // set by Start; empty host: no webhook

  metrics::Counter* scrapes_ok = nullptr;
  metrics::Counter* scrapes_failed = nullptr;
  metrics::Counter* webhook_sent = nullptr;
  metrics::Counter* webhook_failed = nullptr;
  metrics::Counter* webhook_dropped = nullptr;
  metrics::Gauge* round_seconds = nullptr;

  mutable absl::Mutex mu;
  asio::steady_timer timer ABSL_GUARDED_BY(mu);
  asio::steady_timer webhook_timer ABSL_GUARDED_BY(mu);
  metrics::AlertEvaluator eval ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;
  bool running ABSL_GUARDED_BY(mu) = false;  // between Start and Stop
  bool webhook_parsed = false;               // Start's first call; Start and Stop: one thread
  bool round_active ABSL_GUARDED_BY(mu) = false;
  std::optional<std::vector<metrics::ScrapeTarget>> file_sd_written ABSL_GUARDED_BY(mu);
  bool round_due ABSL_GUARDED_BY(mu) = false;  // the timer fired during a round
  std::deque<metrics::ScrapeTarget> queue ABSL_GUARDED_BY(mu);
  int in_flight ABSL_GUARDED_BY(mu) = 0;
  absl::Time round_start ABSL_GUARDED_BY(mu);
  absl::Time last_round ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  std::set<std::string> down ABSL_GUARDED_BY(mu);  // instances whose last scrape failed
  std::deque<std::string> outbox ABSL_GUARDED_BY(mu);
  bool sending ABSL_GUARDED_BY(mu) = false;
  int attempts ABSL_GUARDED_BY(mu) = 0;
};

void ObserverRole::Impl::Register(metrics::Registry& r) {
  auto& scrapes = r.AddCounter("exaserve_observer_scrapes_total",
                               "Scrapes of members' /metrics by outcome (ok, error).", {"outcome"});
  scrapes_ok = &scrapes.WithLabels({"ok"});
  scrapes_failed = &scrapes.WithLabels({"error"});
  auto& webhooks =
      r.AddCounter("exaserve_observer_webhook_messages_total",
                   "Alertmanager webhook messages by outcome: sent, failed (after retries), "
                   "dropped (the queue was full).",
                   {"outcome"});
  webhook_sent = &webhooks.WithLabels({"sent"});
  webhook_failed = &webhooks.WithLabels({"failed"});
  webhook_dropped = &webhooks.WithLabels({"dropped"});
  round_seconds = &r.SimpleGauge("exaserve_observer_scrape_round_seconds",
                                 "How long the last scrape round of every member took.");
  std::weak_ptr<Impl> weak = shared_from_this();
  auto stat = [weak](auto field) {
    return [weak, field] {
      auto self = weak.lock();
      if (!self) return 0.0;
      absl::MutexLock lock(&self->mu);
      return static_cast<double>(self->eval.stats().*field);
    };
  };
  using Stats = metrics::AlertEvaluator::Stats;
  r.AddGaugeCallback("exaserve_observer_targets", "Members the observer scrapes.",
                     stat(&Stats::targets));
  r.AddGaugeCallback("exaserve_observer_targets_up", "Members that answered their last scrape.",
                     stat(&Stats::targets_up));
  r.AddGaugeCallback("exaserve_observer_series", "Series the alert rules keep.",
                     stat(&Stats::series));
  r.AddCounterCallback("exaserve_observer_series_dropped_total",
                       "Series refused because observer.max_series were kept.",
                       stat(&Stats::series_dropped));
  // Prometheus' own shape: one series per pending or firing alert, value 1.
  r.AddCollector("ALERTS", "Alerts pending or firing on this observer (value 1).", "gauge", [weak] {
    std::vector<metrics::Registry::Collected> out;
    auto self = weak.lock();
    if (!self) return out;
    absl::MutexLock lock(&self->mu);
    for (const Alert& a : self->eval.Alerts()) {
      if (a.state == AlertState::kResolved) continue;
      metrics::Registry::Collected c;
      c.labels.assign(a.labels.begin(), a.labels.end());
      c.labels.emplace_back("alertstate", std::string(AlertStateName(a.state)));
      std::sort(c.labels.begin(), c.labels.end());
      c.value = 1;
      out.push_back(std::move(c));
    }
    return out;
  });
}

void ObserverRole::Impl::Arm(absl::Duration delay) {
  timer.expires_after(absl::ToChronoNanoseconds(delay));
  timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->StartRound(true);
  });
}

void ObserverRole::Impl::StartRound(bool from_timer) {
  std::vector<metrics::ScrapeTarget> found = targets();
  std::vector<metrics::ScrapeTarget> launch;
  {
    absl::MutexLock lock(&mu);
    if (stopped) return;
    if (from_timer) Arm(options.scrape_interval);
    if (round_active) {
      round_due = true;  // starts as soon as this round ends
      return;
    }
    round_due = false;
    if (options.write_file_sd && file_sd_written != found) {
      // Small and rare (the member set changed): written here, on the io thread.
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(options.file_sd_path).parent_path(),
                                          ec);
      if (absl::Status s = WriteFileAtomically(options.file_sd_path, FileSdJson(found)); s.ok()) {
        file_sd_written = found;
      } else {
        EXA_LOG_WARN("observer", "file_sd not written", {{"error", ToStd(s.message())}});
        file_sd_written = found;  // not retried every round; the next change tries again
      }
    }
    round_active = true;
    round_start = clock.Now();
    eval.SetTargets(found);
    queue.assign(found.begin(), found.end());
    launch = TakeLaunchesLocked();
    if (launch.empty()) {  // nothing to scrape: still evaluate (rules hold without data)
      round_active = false;
      Announce(eval.Evaluate(clock.Now()));
    }
  }
  Launch(launch);
  PumpWebhook();
}

std::vector<metrics::ScrapeTarget> ObserverRole::Impl::TakeLaunchesLocked() {
  std::vector<metrics::ScrapeTarget> launch;
  while (in_flight < options.scrape_concurrency && !queue.empty()) {
    launch.push_back(std::move(queue.front()));
    queue.pop_front();
    ++in_flight;
  }
  return launch;
}

void ObserverRole::Impl::Launch(const std::vector<metrics::ScrapeTarget>& launch) {
  for (const metrics::ScrapeTarget& target : launch) {
    net::HttpClientRequest request;
    size_t colon = target.instance.rfind(':');
    request.host = target.instance.substr(0, colon);
    if (request.host.size() > 2 && request.host.front() == '[') {
      request.host = request.host.substr(1, request.host.size() - 2);
    }
    request.port = static_cast<uint16_t>(std::stoi(target.instance.substr(colon + 1)));
    request.target = "/metrics";
    request.timeout = timeout;
    request.max_response_bytes = options.scrape_max_bytes.value;
    net::HttpFetch(io.context(), std::move(request),
                   [self = shared_from_this(), target](auto result) {
                     self->OnScrape(target, std::move(result));
                   });
  }
}

void ObserverRole::Impl::OnScrape(const metrics::ScrapeTarget& target,
                                  absl::StatusOr<net::HttpClientResponse> result) {
  const absl::Time now = clock.Now();
  absl::StatusOr<std::vector<metrics::ParsedSample>> samples;
  if (!result.ok()) {
    samples = result.status();
  } else if (result->status != 200) {
    samples = absl::UnavailableError(StrCat("HTTP ", result->status));
  } else {
    samples = metrics::ParseExposition(
        result->body, [this](std::string_view name) { return filter.Wants(name); });
  }
  std::vector<metrics::ScrapeTarget> launch;
  {
    absl::MutexLock lock(&mu);
    --in_flight;
    if (samples.ok()) {
      scrapes_ok->Increment();
      eval.Ingest(now, target, *samples);
      if (down.erase(target.instance) > 0) {
        EXA_LOG_INFO("observer", "scrape target answers again",
                     {{"instance", target.instance}, {"node", target.node}});
      }
    } else {
      scrapes_failed->Increment();
      eval.ScrapeFailed(now, target);
      if (down.insert(target.instance).second) {
        EXA_LOG_WARN("observer", "scrape failed",
                     {{"instance", target.instance},
                      {"node", target.node},
                      {"error", ToStd(samples.status().message())}});
      }
    }
    if (stopped) return;
    launch = TakeLaunchesLocked();
    if (in_flight == 0 && queue.empty() && round_active) {
      round_active = false;
      last_round = now;
      round_seconds->Set(absl::ToDoubleSeconds(now - round_start));
      Announce(eval.Evaluate(now));
      if (round_due)
        asio::post(io.context(), [self = shared_from_this()] { self->StartRound(false); });
    }
  }
  Launch(launch);
  PumpWebhook();
}

// Logs each change and queues one webhook message per alertname.
void ObserverRole::Impl::Announce(const std::vector<Alert>& changed) {
  std::map<std::string, std::vector<Alert>> by_name;
  for (const Alert& a : changed) {
    const bool firing = a.state == AlertState::kFiring;
    std::initializer_list<LogField> fields = {
        {"alertname", a.name},           {"severity", a.severity},
        {"labels", RulesText(a.labels)}, {"value", a.value},
        {"summary", a.summary},          {"since", Rfc3339(firing ? a.active_since : a.fired_at)}};
    if (firing) {
      EXA_LOG_WARN("observer", "alert firing", fields);
    } else {
      EXA_LOG_INFO("observer", "alert resolved", fields);
    }
    by_name[a.name].push_back(a);
  }
  if (webhook.host.empty()) return;
  for (const auto& [name, alerts] : by_name) {
    if (outbox.size() >= static_cast<size_t>(options.webhook_queue)) {
      webhook_dropped->Increment();
      EXA_LOG_WARN("observer", "webhook queue full: notification dropped", {{"alertname", name}});
      continue;
    }
    outbox.push_back(AlertmanagerWebhookJson(alerts, external_url));
  }
}

void ObserverRole::Impl::PumpWebhook() {
  net::HttpClientRequest request;
  {
    absl::MutexLock lock(&mu);
    if (stopped || sending || outbox.empty()) return;
    sending = true;
    request = webhook;
    request.body = outbox.front();
  }
  net::HttpFetch(io.context(), std::move(request),
                 [self = shared_from_this()](auto result) { self->OnWebhook(result); });
}

void ObserverRole::Impl::OnWebhook(const absl::StatusOr<net::HttpClientResponse>& result) {
  const bool ok = result.ok() && result->status >= 200 && result->status < 300;
  {
    absl::MutexLock lock(&mu);
    if (ok || ++attempts >= kWebhookAttempts) {
      if (ok) {
        webhook_sent->Increment();
      } else {
        webhook_failed->Increment();
        EXA_LOG_WARN("observer", "webhook failed: notification dropped",
                     {{"url", options.webhook_url},
                      {"attempts", attempts},
                      {"error", result.ok() ? StrCat("HTTP ", result->status)
                                            : std::string(ToStd(result.status().message()))}});
      }
      attempts = 0;
      outbox.pop_front();
      sending = false;
    } else {
      // Still `sending`: the retry below is the next send.
      webhook_timer.expires_after(std::chrono::seconds(1));
      webhook_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec) return;
        {
          absl::MutexLock lock(&self->mu);
          self->sending = false;
        }
        self->PumpWebhook();
      });
      return;
    }
  }
  PumpWebhook();
}

ObserverRole::ObserverRole(const ObserverOptions& options, std::string node_id,
                           std::string external_url, net::IoRunner& io, metrics::Registry& registry,
                           Targets targets, Clock& clock)
    : impl_(std::make_shared<Impl>(options, std::move(node_id), std::move(external_url), io,
                                   std::move(targets), clock)) {
  impl_->Register(registry);
}

ObserverRole::~ObserverRole() { Stop(); }

absl::Status ObserverRole::Start() {
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->running) return absl::OkStatus();
  }
  // The webhook target is parsed once: a restart (re-elected) reuses it, and a notification
  // still in flight from the last term may be reading it.
  if (!impl_->webhook_parsed && !impl_->options.webhook_url.empty()) {
    absl::Status s = net::ParseHttpUrl(impl_->options.webhook_url, &impl_->webhook);
    if (!s.ok()) return absl::InvalidArgumentError(StrCat("observer.webhook_url: ", s.message()));
    impl_->webhook.method = "POST";
    impl_->webhook.content_type = "application/json";
    impl_->webhook.timeout = impl_->options.webhook_timeout;
    impl_->webhook.max_response_bytes = 64 << 10;
  }
  impl_->webhook_parsed = true;
  absl::MutexLock lock(&impl_->mu);
  impl_->stopped = false;
  impl_->running = true;
  // The first round soon after start (membership is still converging; later rounds see more).
  impl_->Arm(std::min(impl_->options.scrape_interval, absl::Seconds(1)));
  EXA_LOG_INFO("observer", "observing",
               {{"scrape_interval", absl::FormatDuration(impl_->options.scrape_interval)},
                {"webhook", impl_->options.webhook_url.empty() ? std::string("none")
                                                               : impl_->options.webhook_url}});
  return absl::OkStatus();
}

void ObserverRole::Stop() {
  absl::MutexLock lock(&impl_->mu);
  impl_->stopped = true;
  impl_->running = false;
  // A round cut short never completes (its scrapes' completions see `stopped`): forget it, so a
  // restart (re-elected) begins a fresh one. in_flight stays exact: those completions still
  // count themselves out.
  impl_->round_active = false;
  impl_->round_due = false;
  impl_->queue.clear();
  impl_->timer.cancel();
  impl_->webhook_timer.cancel();
}

bool ObserverRole::running() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->running;
}

void ObserverRole::FillAlerts(exaserve::v1::AlertsResponse* response) const {
  absl::MutexLock lock(&impl_->mu);
  response->set_node_id(impl_->node_id);
  const auto stats = impl_->eval.stats();
  response->set_targets(static_cast<uint32_t>(stats.targets));
  response->set_targets_up(static_cast<uint32_t>(stats.targets_up));
  response->set_last_scrape_unix_ms(UnixMillis(impl_->last_round));
  for (const Alert& a : impl_->eval.Alerts()) {
    auto* out = response->add_alerts();
    out->set_name(a.name);
    out->set_severity(a.severity);
    out->set_state(std::string(AlertStateName(a.state)));
    for (const auto& [k, v] : a.labels) (*out->mutable_labels())[k] = v;
    out->set_value(a.value);
    out->set_threshold(a.threshold);
    out->set_summary(a.summary);
    out->set_active_since_unix_ms(UnixMillis(a.active_since));
    out->set_fired_at_unix_ms(UnixMillis(a.fired_at));
    out->set_resolved_at_unix_ms(UnixMillis(a.resolved_at));
  }
}

}  // namespace exa::daemon
