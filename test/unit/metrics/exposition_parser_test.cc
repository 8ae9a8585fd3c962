// The observer reads back exactly what /metrics writes, and refuses malformed text naming the
// line rather than guessing.
#include "metrics/exposition_parser.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "metrics/host_metrics.h"
#include "metrics/registry.h"

namespace exa::metrics {
namespace {

TEST_CASE("Exposition round-trips through the registry", "[metrics]") {
  Registry r;
  r.AddCounter("exa_requests_total", "Requests.", {"path", "code"})
      .WithLabels({"/v1/\"x\"\n\\", "200"})
      .Increment(3);
  r.AddHistogram("exa_seconds", "Latency.", {}, {0.5, 2}).WithLabels({}).Observe(1);
  r.AddCollector("ALERTS", "Alerts.", "gauge", [] {
    return std::vector<Registry::Collected>{{{{"alertname", "A"}, {"severity", "P0"}}, 1}};
  });
  auto samples = ParseExposition(r.Expose());
  REQUIRE(samples.ok());
  REQUIRE(samples->size() == 1 + 3 + 2 + 1);
  const ParsedSample& c = (*samples)[0];
  CHECK(c.name == "exa_requests_total");
  CHECK(c.value == 3);
  // Sorted by label name: code before path; escapes undone.
  REQUIRE(c.labels.size() == 2);
  CHECK(c.labels[0] == std::pair<std::string, std::string>{"code", "200"});
  CHECK(LabelValue(c.labels, "path") == "/v1/\"x\"\n\\");
  CHECK((*samples)[3].name == "exa_seconds_bucket");
  CHECK(LabelValue((*samples)[3].labels, "le") == "+Inf");
  CHECK((*samples)[3].value == 1);
  CHECK((*samples)[6].name == "ALERTS");
  CHECK(LabelValue((*samples)[6].labels, "severity") == "P0");
}

TEST_CASE("Exposition values, timestamps, comments and the name filter", "[metrics]") {
  auto samples = ParseExposition(
      "# HELP a Something.\n# TYPE a gauge\n\na NaN\nb{x=\"1\",} +Inf 1700000000000\r\n"
      "  c -Inf\nd 1.5e3\nskipped{y=\"z\"} 7\n",
      [](std::string_view name) { return name != "skipped"; });
  REQUIRE(samples.ok());
  REQUIRE(samples->size() == 4);
  CHECK(std::isnan((*samples)[0].value));
  CHECK((*samples)[1].value == INFINITY);
  CHECK(LabelValue((*samples)[1].labels, "x") == "1");
  CHECK((*samples)[2].value == -INFINITY);
  CHECK((*samples)[3].value == 1500);
}

TEST_CASE("Malformed exposition is refused with the line", "[metrics]") {
  auto no_value = ParseExposition("a 1\nb{x=\"1\"}\n");
  REQUIRE_FALSE(no_value.ok());
  CHECK(std::string(no_value.status().message()).find("line 2") != std::string::npos);
  auto unquoted = ParseExposition("a{x=1} 2\n");
  REQUIRE_FALSE(unquoted.ok());
  CHECK(std::string(unquoted.status().message()).find("double-quoted") != std::string::npos);
  CHECK_FALSE(ParseExposition("a{x=\"1\" 2\n").ok());
  CHECK_FALSE(ParseExposition("9a 2\n").ok());
  CHECK_FALSE(ParseExposition("a 2x\n").ok());
  CHECK(ParseExposition("a 1\nb 2\nc 3\n", {}, 2).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("Network interfaces come from sysfs, loopback left out, speed where known", "[metrics]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / "exa_host_metrics_test";
  fs::remove_all(root);
  auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };
  write(root / "lo/type", "772\n");
  write(root / "lo/statistics/rx_bytes", "5\n");
  write(root / "eth0/type", "1\n");
  write(root / "eth0/speed", "25000\n");
  write(root / "eth0/statistics/rx_bytes", "1000\n");
  write(root / "eth0/statistics/tx_bytes", "2000\n");
  write(root / "veth1/type", "1\n");
  write(root / "veth1/speed", "-1\n");
  write(root / "veth1/statistics/rx_bytes", "7\n");
  write(root / "veth1/statistics/tx_bytes", "8\n");
  auto nics = ReadNetworkInterfaces(root.string());
  REQUIRE(nics.size() == 2);
  CHECK(nics[0].name == "eth0");
  CHECK(nics[0].receive_bytes == 1000);
  CHECK(nics[0].transmit_bytes == 2000);
  CHECK(nics[0].speed_bytes_per_second == 25000.0 * 125000);  // 25 Gbit/s
  CHECK(nics[1].speed_bytes_per_second == 0);
  Registry r;
  RegisterNetworkMetrics(r, root.string());
  const std::string text = r.Expose();
  CHECK(text.find("exaserve_network_receive_bytes_total{device=\"eth0\"} 1000\n") !=
        std::string::npos);
  CHECK(text.find("exaserve_network_speed_bytes{device=\"veth1\"}") == std::string::npos);
  CHECK(text.find("device=\"lo\"") == std::string::npos);
  fs::remove_all(root);
}

}  // namespace
}  // namespace exa::metrics
