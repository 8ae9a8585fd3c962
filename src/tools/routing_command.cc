// `exaserve-cli routing` (routing_command.h): membership for the gateways, their /metrics over
// HTTP, gateway::SummarizeRouting for the figures.
#include "tools/routing_command.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <iostream>
#include <map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include "absl/strings/str_format.h"
#include "common/host_port.h"
#include "common/strings.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "gateway/routing_report.h"
#include "metrics/exposition_parser.h"
#include "net/http_client.h"
#include "net/tls.h"
#include "nlohmann/json.hpp"
#include "tools/table.h"

namespace exa::tools {
namespace {

namespace pb = exaserve::v1;
using nlohmann::json;

struct Gateway {
  std::string node_id;  // "" for --metrics
  std::string metrics_address;
  absl::StatusOr<gateway::RoutingReport> report = absl::UnavailableError("not asked");
};

// The live gateways in the membership view of the node at --addr, sorted by node id.
absl::StatusOr<std::vector<Gateway>> FindGateways(const ClusterAccess& a) {
  auto stub = pb::Admin::NewStub(net::NewChannel(a.addr));
  pb::MembersResponse members;
  if (grpc::Status s = stub->Members(MakeContext(a).get(), {}, &members); !s.ok()) {
    return absl::UnavailableError(
        StrCat(a.addr, ": ", s.error_message(), " (", static_cast<int>(s.error_code()), ")"));
  }
  std::map<std::string, Gateway> found;
  for (const pb::MemberInfo& m : members.members()) {
    const bool live = m.state() == "alive" || m.state() == "suspect";
    const bool gateway =
        std::find(m.roles().begin(), m.roles().end(), "gateway") != m.roles().end();
    if (live && gateway && !m.http_address().empty()) {
      found[m.node_id()] = {m.node_id(), m.http_address()};
    }
  }
  std::vector<Gateway> out;
  for (auto& [id, g] : found) out.push_back(std::move(g));
  return out;
}

absl::StatusOr<gateway::RoutingReport> Report(absl::StatusOr<net::HttpClientResponse> response) {
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(StrCat(
        "/metrics answered HTTP ", response->status,
        response->status == 404 ? " (metrics.listen serves it elsewhere: give --metrics)" : ""));
  }
  auto samples = metrics::ParseExposition(response->body, gateway::IsRoutingMetric);
  if (!samples.ok()) return samples.status();
  return gateway::SummarizeRouting(*samples);
}

// Reads every gateway's /metrics at once, each within `timeout`.
void Scrape(std::vector<Gateway>& gateways, absl::Duration timeout) {
  boost::asio::io_context io;
  for (Gateway& g : gateways) {
    const size_t colon = g.metrics_address.rfind(':');
    net::HttpClientRequest request;
    request.host = g.metrics_address.substr(0, colon);
    if (request.host.size() >= 2 && request.host.front() == '[') {
      request.host = request.host.substr(1, request.host.size() - 2);
    }
    request.port = static_cast<uint16_t>(std::stoi(g.metrics_address.substr(colon + 1)));
    request.target = "/metrics";
    request.timeout = timeout;
    net::HttpFetch(io, std::move(request), [&g](absl::StatusOr<net::HttpClientResponse> r) {
      g.report = Report(std::move(r));
    });
  }
  io.run();  // the callbacks run here, one at a time
}

json Number(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

json LatencyJson(const gateway::LatencySummary& s) {
  return {{"count", s.count},
          {"mean_seconds", Number(s.mean_seconds)},
          {"p50_seconds", Number(s.p50_seconds)},
          {"p99_seconds", Number(s.p99_seconds)}};
}

json GatewayJson(const Gateway& g) {
  json out = {{"node_id", g.node_id}, {"metrics_address", g.metrics_address}};
  if (!g.report.ok()) {
    out["error"] = std::string(g.report.status().message());
    return out;
  }
  const gateway::RoutingReport& r = *g.report;
  out.update({{"policy", r.policy},
              {"decisions", r.decisions},
              {"cache_decisions", r.cache_decisions},
              {"cache_decision_share", Number(r.CacheDecisionShare())},
              {"prompt_tokens", r.prompt_tokens},
              {"cached_tokens", r.cached_tokens},
              {"prefix_hit_ratio", Number(r.PrefixHitRatio())},
              {"ttft", LatencyJson(r.ttft)},
              {"ttft_estimated", LatencyJson(r.ttft_estimated)},
              {"estimate_ratio_p50", Number(r.estimate_ratio_p50)},
              {"estimate_near_share", Number(r.estimate_near_share)}});
  return out;
}

// The answering gateways' decisions and tokens summed by policy.
std::map<std::string, gateway::RoutingReport> ByPolicy(const std::vector<Gateway>& gateways,
                                                       std::map<std::string, int>* counts) {
  std::map<std::string, gateway::RoutingReport> out;
  for (const Gateway& g : gateways) {
    if (!g.report.ok()) continue;
    const std::string policy = g.report->policy.empty() ? "unknown" : g.report->policy;
    gateway::RoutingReport& sum = out[policy];
    sum.policy = policy;
    sum.decisions += g.report->decisions;
    sum.cache_decisions += g.report->cache_decisions;
    sum.prompt_tokens += g.report->prompt_tokens;
    sum.cached_tokens += g.report->cached_tokens;
    ++(*counts)[policy];
  }
  return out;
}

std::string Percent(double share) {
  return std::isnan(share) ? "-" : absl::StrFormat("%.1f%%", 100 * share);
}
std::string Seconds(double seconds) {
  if (std::isnan(seconds)) return "-";
  return seconds < 1 ? absl::StrFormat("%.0fms", seconds * 1000)
                     : absl::StrFormat("%.2fs", seconds);
}
std::string Fixed(double v) { return std::isnan(v) ? "-" : absl::StrFormat("%.2f", v); }
std::string Count(double v) { return absl::StrFormat("%.0f", v); }

void PrintGateways(const std::vector<Gateway>& gateways) {
  Table table({"GATEWAY", "METRICS", "POLICY", "DECISIONS", "ON CACHE", "PREFIX HIT", "TTFT P50",
               "TTFT P99", "EST P50", "ACTUAL/EST P50", "NEAR EST"},
              {3, 4, 5, 6, 7, 8, 9, 10});
  for (const Gateway& g : gateways) {
    if (!g.report.ok()) continue;
    const gateway::RoutingReport& r = *g.report;
    table.Add({g.node_id.empty() ? "-" : g.node_id, g.metrics_address,
               r.policy.empty() ? "unknown" : r.policy, Count(r.decisions),
               Percent(r.CacheDecisionShare()), Percent(r.PrefixHitRatio()),
               Seconds(r.ttft.p50_seconds), Seconds(r.ttft.p99_seconds),
               Seconds(r.ttft_estimated.p50_seconds), Fixed(r.estimate_ratio_p50),
               Percent(r.estimate_near_share)});
  }
  if (!table.empty()) table.Print();
  for (const Gateway& g : gateways) {
    if (g.report.ok()) continue;
    const std::string who =
        g.node_id.empty() ? g.metrics_address : StrCat(g.node_id, " (", g.metrics_address, ")");
    std::cout << "gateway " << who << ": unavailable: " << g.report.status().message() << "\n";
  }
}

void PrintByPolicy(const std::vector<Gateway>& gateways) {
  std::map<std::string, int> counts;
  const auto by_policy = ByPolicy(gateways, &counts);
  if (by_policy.empty()) return;
  std::cout << "\nby policy\n";
  Table table({"POLICY", "GATEWAYS", "DECISIONS", "ON CACHE", "PREFIX HIT"}, {1, 2, 3, 4});
  for (const auto& [policy, r] : by_policy) {
    table.Add({policy, StrCat(counts[policy]), Count(r.decisions), Percent(r.CacheDecisionShare()),
               Percent(r.PrefixHitRatio())});
  }
  table.Print();
}

void PrintJson(const std::vector<Gateway>& gateways) {
  json out = {{"gateways", json::array()}, {"by_policy", json::array()}};
  for (const Gateway& g : gateways) out["gateways"].push_back(GatewayJson(g));
  std::map<std::string, int> counts;
  for (const auto& [policy, r] : ByPolicy(gateways, &counts)) {
    out["by_policy"].push_back({{"policy", policy},
                                {"gateways", counts[policy]},
                                {"decisions", r.decisions},
                                {"cache_decisions", r.cache_decisions},
                                {"cache_decision_share", Number(r.CacheDecisionShare())},
                                {"prompt_tokens", r.prompt_tokens},
                                {"cached_tokens", r.cached_tokens},
                                {"prefix_hit_ratio", Number(r.PrefixHitRatio())}});
  }
  std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

// The gateways to read: --metrics alone, else the membership view's, narrowed by --gateway.
// Sets *exit_code (usage or failure) and returns nullopt when there are none to read.
std::optional<std::vector<Gateway>> Targets(const RoutingCommand& c, const ClusterAccess& a,
                                            int* exit_code) {
  if (!c.metrics.empty()) return std::vector<Gateway>{{"", c.metrics}};
  absl::StatusOr<std::vector<Gateway>> gateways = FindGateways(a);
  if (!gateways.ok()) {
    *exit_code = Failure(std::string(gateways.status().message()), "routing");
    return std::nullopt;
  }
  if (gateways->empty()) {
    *exit_code = Failure(StrCat("no live gateway in the membership view of ", a.addr), "routing");
    return std::nullopt;
  }
  if (c.gateway.empty()) return *std::move(gateways);
  std::string known;
  for (const Gateway& g : *gateways) {
    if (g.node_id == c.gateway) return std::vector<Gateway>{g};
    StrAppend(&known, known.empty() ? "" : ", ", g.node_id);
  }
  *exit_code = Usage(StrCat("--gateway \"", c.gateway, "\": no such live gateway in the view of ",
                            a.addr, "; the gateways are ", known),
                     "routing");
  return std::nullopt;
}

}  // namespace

void AddRoutingCommand(CLI::App& app, RoutingCommand* c) {
  c->app = app.add_subcommand(
      "routing",
      "how the gateways route: policy, decisions onto cached prefixes, prefix hit ratio, "
      "estimated vs actual time to first token (from each gateway's /metrics)");
  c->app->add_option("--gateway", c->gateway, "only this gateway (its node id, as members prints)");
  c->app->add_option("--metrics", c->metrics,
                     "read this HOST:PORT's /metrics instead of the gateways membership lists "
                     "(a node with metrics.listen)");
}

std::optional<int> RunRoutingCommand(const RoutingCommand& c, bool json, const ClusterAccess& a) {
  if (c.app == nullptr || !c.app->parsed()) return std::nullopt;
  if (!c.metrics.empty()) {
    if (std::string error = HostPortError(c.metrics); !error.empty()) {
      return Usage(StrCat("--metrics ", error), "routing");
    }
    if (!c.gateway.empty()) return Usage("--gateway and --metrics exclude each other", "routing");
  }
  int exit_code = 0;
  std::optional<std::vector<Gateway>> gateways = Targets(c, a, &exit_code);
  if (!gateways) return exit_code;
  Scrape(*gateways, a.timeout);
  if (json) {
    PrintJson(*gateways);
  } else {
    PrintGateways(*gateways);
    PrintByPolicy(*gateways);
  }
  const bool any = std::any_of(gateways->begin(), gateways->end(),
                               [](const Gateway& g) { return g.report.ok(); });
  return any ? 0 : Failure("no gateway's /metrics could be read", "routing");
}

}  // namespace exa::tools
