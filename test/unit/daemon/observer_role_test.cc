// The observer role end to end in one process: it scrapes a real HTTP /metrics, fires the replica
// alert only after its duration, shows it as ALERTS and through FillAlerts, posts Alertmanager
// webhook messages, and resolves; targets come from membership with the right host and port.
#include "daemon/observer_role.h"

#include <atomic>
#include <mutex>

#include <catch2/catch.hpp>

#include "absl/time/clock.h"
#include "net/http_server.h"
#include "nlohmann/json.hpp"

namespace exa::daemon {
namespace {

// Waits for `cond` up to `deadline`; true when it held.
template <typename F>
bool WaitFor(F cond, absl::Duration deadline = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return cond();
}

TEST_CASE("Scrape targets come from live members with an HTTP port", "[observer]") {
  std::vector<membership::Member> members(4);
  members[0].id = "a";
  members[0].address = "10.0.0.1:7946";
  members[0].metadata.http_port = 8080;
  members[1].id = "b";
  members[1].address = "10.0.0.2:7946";
  members[1].metadata.http_port = 8081;
  members[1].state = membership::MemberState::kSuspect;
  members[2].id = "c";
  members[2].address = "10.0.0.3:7946";
  members[2].metadata.http_port = 8080;
  members[2].state = membership::MemberState::kDead;
  members[3].id = "d";
  members[3].address = "10.0.0.4:7946";  // no HTTP port advertised
  auto targets = ScrapeTargets(members);
  REQUIRE(targets.size() == 2);
  CHECK(targets[0].instance == "10.0.0.1:8080");
  CHECK(targets[0].node == "a");
  CHECK(targets[1].instance == "10.0.0.2:8081");
}

TEST_CASE("The file_sd file lists every target with node, rack and roles labels", "[observer]") {
  std::vector<metrics::ScrapeTarget> targets = {{"10.0.0.1:8080", "a", "r1", "inference"},
                                                {"10.0.0.2:8080", "b", "", ""}};
  auto j = nlohmann::json::parse(FileSdJson(targets));
  REQUIRE(j.size() == 2);
  CHECK(j[0]["targets"] == nlohmann::json::array({"10.0.0.1:8080"}));
  CHECK(j[0]["labels"]["node"] == "a");
  CHECK(j[0]["labels"]["rack"] == "r1");
  CHECK(j[0]["labels"]["roles"] == "inference");
  CHECK_FALSE(j[1]["labels"].contains("rack"));  // no empty labels
  CHECK(nlohmann::json::parse(FileSdJson({})).empty());
}

TEST_CASE("Webhook messages follow the Alertmanager format", "[observer]") {
  metrics::Alert a;
  a.name = "ExaServeReplicasShort";
  a.severity = "P0";
  a.labels = {{"alertname", a.name}, {"deployment", "tiny"}, {"severity", "P0"}};
  a.state = metrics::AlertState::kFiring;
  a.summary = "1 of 3";
  a.fired_at = absl::FromUnixSeconds(1700000000);
  metrics::Alert b = a;
  b.labels = {{"alertname", a.name}, {"deployment", "big"}, {"severity", "P0"}};
  b.state = metrics::AlertState::kResolved;
  b.resolved_at = absl::FromUnixSeconds(1700000060);
  auto j = nlohmann::json::parse(AlertmanagerWebhookJson({a, b}, "http://obs:8080"));
  CHECK(j["version"] == "4");
  CHECK(j["status"] == "firing");
  CHECK(j["groupLabels"]["alertname"] == "ExaServeReplicasShort");
  CHECK(j["commonLabels"] == nlohmann::json({{"alertname", a.name}, {"severity", "P0"}}));
  REQUIRE(j["alerts"].size() == 2);
  CHECK(j["alerts"][0]["status"] == "firing");
  CHECK(j["alerts"][0]["labels"]["deployment"] == "tiny");
  CHECK(j["alerts"][0]["startsAt"] == "2023-11-14T22:13:20.000Z");
  CHECK(j["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z");
  CHECK(j["alerts"][0]["annotations"]["summary"] == "1 of 3");
  CHECK(j["alerts"][1]["status"] == "resolved");
  CHECK(j["alerts"][1]["endsAt"] == "2023-11-14T22:14:20.000Z");
  CHECK(j["alerts"][0]["fingerprint"] != j["alerts"][1]["fingerprint"]);
  CHECK(nlohmann::json::parse(AlertmanagerWebhookJson({b}, ""))["status"] == "resolved");
}

TEST_CASE("The observer fires after the duration, notifies, and resolves", "[observer]") {
  net::IoRunner io(2);
  std::mutex mu;
  std::string metrics_text;
  std::vector<std::string> hooks;
  auto set_ready = [&](int ready) {
    std::lock_guard<std::mutex> lock(mu);
    metrics_text =
        "exaserve_deployment_replicas_desired{deployment=\"tiny\"} 3\n"
        "exaserve_deployment_replicas_ready{deployment=\"tiny\"} " +
        std::to_string(ready) + "\n";
  };
  set_ready(3);
  net::HttpServerOptions http;
  http.bind_address = "127.0.0.1";
  http.port = 0;
  net::HttpServer server(io, http);
  server.AddRoute("GET", "/metrics", [&](const net::HttpRequest&) {
    std::lock_guard<std::mutex> lock(mu);
    return net::HttpResponse{200, "text/plain", metrics_text, {}};
  });
  server.AddRoute("POST", "/hook", [&](const net::HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    hooks.push_back(r.body);
    return net::HttpResponse{200, "application/json", "{}", {}};
  });
  REQUIRE(server.Start().ok());
  const std::string instance = "127.0.0.1:" + std::to_string(server.port());

  ObserverOptions o;
  o.scrape_interval = absl::Milliseconds(50);
  o.replicas_interval = absl::Milliseconds(50);
  o.replicas_for = absl::Milliseconds(500);
  o.webhook_url = "http://" + instance + "/hook";
  metrics::Registry registry;
  ObserverRole role(o, "obs-1", "http://obs", io, registry, [&] {
    return std::vector<metrics::ScrapeTarget>{{instance, "sched-1"}};
  });
  REQUIRE(role.Start().ok());
  io.Start();
  auto alerts = [&] {
    exaserve::v1::AlertsResponse r;
    role.FillAlerts(&r);
    return r;
  };
  auto state = [&]() -> std::string {
    auto r = alerts();
    return r.alerts().empty() ? "" : r.alerts(0).state();
  };
  REQUIRE(WaitFor([&] { return alerts().targets_up() == 1; }));
  CHECK(state().empty());

  set_ready(1);
  const absl::Time shortage = absl::Now();
  REQUIRE(WaitFor([&] { return state() == "pending"; }));
  REQUIRE(WaitFor([&] { return state() == "firing"; }));
  CHECK(absl::Now() - shortage >= absl::Milliseconds(500));
  auto firing = alerts().alerts(0);
  CHECK(firing.name() == "ExaServeReplicasShort");
  CHECK(firing.severity() == "P0");
  CHECK(firing.labels().at("deployment") == "tiny");
  const std::string exposed = registry.Expose();
  CHECK(exposed.find("ALERTS{alertname=\"ExaServeReplicasShort\",alertstate=\"firing\","
                     "deployment=\"tiny\",dimension=\"replica_health\",severity=\"P0\"} 1") !=
        std::string::npos);
  CHECK(exposed.find("exaserve_observer_targets_up 1") != std::string::npos);
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return hooks.size() == 1;
  }));

  set_ready(3);
  REQUIRE(WaitFor([&] { return state() == "resolved"; }));
  CHECK(registry.Expose().find("ALERTS{") == std::string::npos);
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return hooks.size() == 2;
  }));
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(nlohmann::json::parse(hooks[0])["status"] == "firing");
    CHECK(nlohmann::json::parse(hooks[1])["status"] == "resolved");
  }
  role.Stop();
  server.CloseAll();
  io.Stop();
}

TEST_CASE("A stopped observer starts again and scrapes (re-elected)", "[observer]") {
  net::IoRunner io(2);
  std::atomic<int> hits{0};
  net::HttpServerOptions http;
  http.bind_address = "127.0.0.1";
  http.port = 0;
  net::HttpServer server(io, http);
  server.AddRoute("GET", "/metrics", [&](const net::HttpRequest&) {
    hits++;
    absl::SleepFor(absl::Milliseconds(30));  // keeps a round in flight when Stop comes
    return net::HttpResponse{200, "text/plain", "exaserve_ready 1\n", {}};
  });
  REQUIRE(server.Start().ok());
  const std::string instance = "127.0.0.1:" + std::to_string(server.port());
  ObserverOptions o;
  o.scrape_interval = absl::Milliseconds(20);
  metrics::Registry registry;
  ObserverRole role(o, "obs-1", "http://obs", io, registry, [&] {
    return std::vector<metrics::ScrapeTarget>{{instance, "n1"}, {instance, "n2"}};
  });
  io.Start();
  CHECK_FALSE(role.running());
  for (int term = 0; term < 3; ++term) {
    REQUIRE(role.Start().ok());
    CHECK(role.running());
    const int before = hits.load();
    REQUIRE(WaitFor([&] { return hits.load() >= before + 6; }));  // rounds keep coming
    // The scrape that made the count is still in its handler: the round is cut short, and its
    // scrapes end while the observer is stopped.
    role.Stop();
    CHECK_FALSE(role.running());
    absl::SleepFor(absl::Milliseconds(100));
  }
  const int after_stop = hits.load();
  absl::SleepFor(absl::Milliseconds(150));
  CHECK(hits.load() <= after_stop + 2);  // at most what was in flight: no new rounds
  server.CloseAll();
  io.Stop();
}

}  // namespace
}  // namespace exa::daemon
