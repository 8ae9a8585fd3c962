#include "tools/cluster_commands.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <tuple>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "common/units.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "exaserve/v1/scheduler.grpc.pb.h"
#include "net/tls.h"
#include "nlohmann/json.hpp"
#include "scheduler/node_view.h"
#include "scheduler/spec.h"
#include "tools/cli_common.h"
#include "tools/table.h"

namespace exa::tools {
namespace {

namespace pb = exaserve::v1;
using nlohmann::json;

// Calls to nodes other than --addr (a scheduler, an observer) are extras of `status`: a slow one
// must not hold the whole answer for the full --timeout.
constexpr absl::Duration kExtraTimeout = absl::Seconds(2);

// The order roles are listed in (docs/architecture.md#roles).
const std::vector<std::string> kRoleOrder = {"scheduler", "gateway", "storage", "inference",
                                             "observer"};

std::unique_ptr<pb::Admin::Stub> Admin(const std::string& addr) {
  return pb::Admin::NewStub(net::NewChannel(addr));
}

bool HasRole(const pb::MemberInfo& m, std::string_view role) {
  return std::find(m.roles().begin(), m.roles().end(), role) != m.roles().end();
}

// gRPC addresses of alive members with `role`; `self_addr` first when the node at --addr
// (`self_id`) has it.
std::vector<std::string> WithRole(const pb::MembersResponse& members, std::string_view role,
                                  const std::string& self_id, const std::string& self_addr) {
  std::vector<std::string> out;
  for (const pb::MemberInfo& m : members.members()) {
    if (m.state() != "alive" || !HasRole(m, role)) continue;
    if (m.node_id() == self_id) {
      out.insert(out.begin(), self_addr);
    } else if (!m.grpc_address().empty()) {
      out.push_back(m.grpc_address());
    }
  }
  return out;
}

json Time(int64_t unix_ms) {
  if (unix_ms == 0) return nullptr;
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string Ago(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  const int64_t seconds = std::max<int64_t>(0, (absl::ToUnixMillis(absl::Now()) - unix_ms) / 1000);
  return DurationToString(absl::Seconds(seconds));
}

// The rule's own labels (alertname, severity and dimension have their own columns).
std::string OwnLabels(const pb::Alert& a) {
  std::map<std::string, std::string> sorted(a.labels().begin(), a.labels().end());
  std::string out;
  for (const auto& [k, v] : sorted) {
    if (k == "alertname" || k == "severity" || k == "dimension") continue;
    StrAppend(&out, out.empty() ? "" : ",", k, "=", v);
  }
  return out.empty() ? "-" : out;
}

json AlertJson(const pb::Alert& a) {
  return {{"name", a.name()},
          {"severity", a.severity()},
          {"state", a.state()},
          {"labels", std::map<std::string, std::string>(a.labels().begin(), a.labels().end())},
          {"value", a.value()},
          {"threshold", a.threshold()},
          {"summary", a.summary()},
          {"active_since", Time(a.active_since_unix_ms())},
          {"fired_at", Time(a.fired_at_unix_ms())},
          {"resolved_at", Time(a.resolved_at_unix_ms())}};
}

// How long the alert has been in its state.
std::string Age(const pb::Alert& a) {
  if (a.state() == "resolved") return Ago(a.resolved_at_unix_ms());
  if (a.state() == "firing") return Ago(a.fired_at_unix_ms());
  return Ago(a.active_since_unix_ms());
}

void PrintAlertRows(const pb::AlertsResponse& r, bool active_only) {
  std::printf("%-9s %-4s %-26s %-8s %-40s %s\n", "STATE", "SEV", "ALERT", "FOR", "LABELS",
              "SUMMARY");
  for (const pb::Alert& a : r.alerts()) {
    if (active_only && a.state() == "resolved") continue;
    std::printf("%-9s %-4s %-26s %-8s %-40s %s\n", a.state().c_str(), a.severity().c_str(),
                a.name().c_str(), Age(a).c_str(), OwnLabels(a).c_str(), a.summary().c_str());
  }
}

struct AlertsFrom {
  std::string addr;
  pb::AlertsResponse response;
};

// The alerts of the node at --addr if it is an observer, else of the first observer in its
// membership view that answers.
absl::StatusOr<AlertsFrom> FetchAlerts(const ClusterAccess& a, absl::Duration timeout) {
  AlertsFrom out{a.addr, {}};
  grpc::Status s = Admin(a.addr)->Alerts(MakeContext(a, timeout).get(), {}, &out.response);
  if (s.ok()) return out;
  if (s.error_code() != grpc::FAILED_PRECONDITION && s.error_code() != grpc::UNIMPLEMENTED) {
    return absl::UnavailableError(StrCat(a.addr, ": ", s.error_message()));
  }
  pb::MembersResponse members;
  s = Admin(a.addr)->Members(MakeContext(a, timeout).get(), {}, &members);
  if (!s.ok()) return absl::UnavailableError(StrCat(a.addr, ": members: ", s.error_message()));
  std::string errors;
  for (const std::string& addr : WithRole(members, "observer", "", "")) {
    out = {addr, {}};
    s = Admin(addr)->Alerts(MakeContext(a, timeout).get(), {}, &out.response);
    if (s.ok()) return out;
    StrAppend(&errors, "; ", addr, ": ", s.error_message());
  }
  if (errors.empty()) {
    return absl::NotFoundError("no live observer in the cluster (start one with --role observer)");
  }
  return absl::UnavailableError(StrCat("no observer answered", errors));
}

int RunAlerts(bool as_json, const ClusterAccess& a) {
  auto found = FetchAlerts(a, a.timeout);
  if (!found.ok()) {
    std::fprintf(stderr, "exaserve-cli: alerts: %s\n",
                 std::string(found.status().message()).c_str());
    return 1;
  }
  const pb::AlertsResponse& r = found->response;
  if (as_json) {
    json list = json::array();
    for (const pb::Alert& alert : r.alerts()) list.push_back(AlertJson(alert));
    json out = {{"observer", r.node_id()},
                {"address", found->addr},
                {"targets", r.targets()},
                {"targets_up", r.targets_up()},
                {"last_scrape", Time(r.last_scrape_unix_ms())},
                {"alerts", list}};
    std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("observer %s (%s): %u targets, %u up, last scrape %s ago\n", r.node_id().c_str(),
              found->addr.c_str(), r.targets(), r.targets_up(),
              Ago(r.last_scrape_unix_ms()).c_str());
  if (r.alerts().empty()) {
    std::printf("no alerts\n");
    return 0;
  }
  PrintAlertRows(r, false);
  return 0;
}

// ---- status ---------------------------------------------------------------------------------

json NodeJson(const pb::StatusResponse& r) {
  return {{"node_id", r.node_id()},
          {"roles", std::vector<std::string>(r.roles().begin(), r.roles().end())},
          {"version", r.version()},
          {"uptime_seconds", r.uptime_seconds()},
          {"rack", r.rack()},
          {"state", r.state()},
          {"grpc_address", r.grpc_address()},
          {"http_address", r.http_address()}};
}

void PrintNode(const pb::StatusResponse& r) {
  std::string roles;
  for (const auto& role : r.roles()) StrAppend(&roles, roles.empty() ? "" : ",", role);
  std::cout << "node     " << r.node_id() << "\n"
            << "state    " << r.state() << "\n"
            << "roles    " << roles << "\n"
            << "rack     " << r.rack() << "\n"
            << "version  " << r.version() << "\n"
            << "uptime   "
            << DurationToString(absl::Seconds(static_cast<int64_t>(r.uptime_seconds()))) << "\n"
            << "grpc     " << r.grpc_address() << "\n"
            << "http     " << r.http_address() << "\n";
}

size_t RoleRank(const pb::MemberInfo& m) {
  size_t best = kRoleOrder.size();
  for (const auto& role : m.roles()) {
    auto it = std::find(kRoleOrder.begin(), kRoleOrder.end(), role);
    best = std::min(best, static_cast<size_t>(it - kRoleOrder.begin()));
  }
  return best;
}

std::string Gpus(const pb::MemberInfo& m) {
  if (m.gpu_count() == 0) return "-";
  if (m.gpu_class() == scheduler::kCpuDeviceModel) return "cpu";
  return StrCat(m.gpu_count(), "x ", m.gpu_class().empty() ? "gpu" : m.gpu_class(),
                m.nvlink_domain().empty() ? "" : " ", m.nvlink_domain());
}

// Nodes by role and rack, with per-role totals.
json MembersJson(std::vector<pb::MemberInfo> nodes) {
  json list = json::array();
  std::map<std::string, int> states;
  std::map<std::string, json> by_role;
  for (const pb::MemberInfo& m : nodes) {
    states[m.state()]++;
    const std::vector<std::string> roles(m.roles().begin(), m.roles().end());
    list.push_back({{"node_id", m.node_id()},
                    {"roles", roles},
                    {"rack", m.rack()},
                    {"state", m.state()},
                    {"gpus", {{"count", m.gpu_count()}, {"class", m.gpu_class()}}},
                    {"replicas", m.replicas()},
                    {"taints", std::vector<std::string>(m.taints().begin(), m.taints().end())},
                    {"grpc_address", m.grpc_address()},
                    {"http_address", m.http_address()}});
    // A CPU inference node offers its host memory as one device (scheduler/node_view.h): a
    // CPU node, not a GPU.
    const bool cpu = m.gpu_class() == scheduler::kCpuDeviceModel;
    for (const std::string& role : roles) {
      json& r = by_role[role];
      if (r.is_null()) r = {{"nodes", 0}, {"alive", 0}, {"gpus", 0}, {"cpu_nodes", 0}};
      r["nodes"] = r["nodes"].get<int>() + 1;
      r["alive"] = r["alive"].get<int>() + (m.state() == "alive" ? 1 : 0);
      r["gpus"] = r["gpus"].get<int>() + (cpu ? 0 : static_cast<int>(m.gpu_count()));
      // Replicas run on inference nodes only, on the CPU or on GPUs: counted once, on that line,
      // not on every role a node also holds.
      if (role == "inference") {
        r["cpu_nodes"] = r["cpu_nodes"].get<int>() + (cpu ? 1 : 0);
        r["replicas"] = r.value("replicas", 0) + static_cast<int>(m.replicas());
      }
    }
  }
  json counts = {{"total", nodes.size()}};
  for (const char* s : {"alive", "suspect", "dead", "left"}) counts[s] = states[s];
  return {{"members", counts}, {"by_role", by_role}, {"nodes", list}};
}

void PrintMembers(const std::vector<pb::MemberInfo>& nodes, const json& summary) {
  std::set<std::string> racks;
  for (const auto& m : nodes) racks.insert(m.rack());
  std::string rack_list;
  for (const auto& r : racks) StrAppend(&rack_list, rack_list.empty() ? "" : ",", r);
  const json& c = summary["members"];
  std::printf("\ncluster  %d members: %d alive, %d suspect, %d dead, %d left; racks: %s\n",
              c["total"].get<int>(), c["alive"].get<int>(), c["suspect"].get<int>(),
              c["dead"].get<int>(), c["left"].get<int>(), rack_list.c_str());
  for (const std::string& role : kRoleOrder) {
    if (!summary["by_role"].contains(role)) continue;
    const json& r = summary["by_role"][role];
    const int n = r["nodes"].get<int>();
    std::string extra;
    if (const int gpus = r["gpus"].get<int>(); gpus > 0) {
      StrAppend(&extra, ", ", gpus, gpus == 1 ? " GPU" : " GPUs");
    }
    if (r["cpu_nodes"].get<int>() > 0) {
      StrAppend(&extra, ", ", r["cpu_nodes"].get<int>(), " on CPU");
    }
    if (r.contains("replicas")) {
      const int replicas = r["replicas"].get<int>();
      StrAppend(&extra, ", ", replicas, replicas == 1 ? " replica" : " replicas");
    }
    std::printf("  %-10s %d node%s (%d alive)%s\n", role.c_str(), n, n == 1 ? "" : "s",
                r["alive"].get<int>(), extra.c_str());
  }
  std::vector<std::array<std::string, 3>> rows;  // roles, rack, node: the columns that vary
  size_t widths[3] = {5, 4, 4};
  for (const pb::MemberInfo& m : nodes) {
    std::string roles;
    for (const auto& r : m.roles()) StrAppend(&roles, roles.empty() ? "" : ",", r);
    rows.push_back({roles, m.rack(), m.node_id()});
    for (size_t i = 0; i < 3; ++i) widths[i] = std::max(widths[i], rows.back()[i].size());
  }
  auto w = [&](size_t i) { return static_cast<int>(widths[i]); };
  std::printf("%-*s  %-*s  %-*s  %-8s %-16s %8s  %s\n", w(0), "ROLES", w(1), "RACK", w(2), "NODE",
              "STATE", "GPUS", "REPLICAS", "TAINTS");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const pb::MemberInfo& m = nodes[i];
    std::string taints;
    for (const auto& t : m.taints()) StrAppend(&taints, taints.empty() ? "" : ",", t);
    std::printf("%-*s  %-*s  %-*s  %-8s %-16s %8u  %s\n", w(0), rows[i][0].c_str(), w(1),
                rows[i][1].c_str(), w(2), rows[i][2].c_str(), m.state().c_str(), Gpus(m).c_str(),
                m.replicas(), taints.c_str());
  }
}

// Deployments from the first scheduler that answers: spec (model@version, replicas) and status.
json Deployments(const ClusterAccess& a, const std::vector<std::string>& schedulers) {
  std::string errors;
  for (const std::string& addr : schedulers) {
    auto stub = pb::Scheduler::NewStub(net::NewChannel(addr));
    pb::GetSpecsResponse specs;
    grpc::Status s = stub->GetSpecs(MakeContext(a, kExtraTimeout).get(), {}, &specs);
    if (!s.ok()) {
      StrAppend(&errors, errors.empty() ? "" : "; ", addr, ": ", s.error_message());
      continue;
    }
    json list = json::array();
    for (const pb::StoredSpec& stored : specs.specs()) {
      json d = {{"name", stored.name()}};
      auto parsed = scheduler::ParseSpecs(stored.yaml(), stored.name());
      if (parsed.ok() && parsed->size() == 1) {
        d["model"] = parsed->front().model;
        d["version"] = parsed->front().version;
        d["desired"] = parsed->front().replicas;
      }
      pb::DescribeRequest request;
      request.set_name(stored.name());
      pb::DescribeResponse described;
      if (stub->Describe(MakeContext(a, kExtraTimeout).get(), request, &described).ok()) {
        json full = json::parse(described.json(), nullptr, false);
        // Its "ready" counts live nodes only (scheduler/describe.h).
        if (!full.is_discarded() && full["status"].is_object()) d["status"] = full["status"];
      }
      list.push_back(std::move(d));
    }
    return {{"scheduler", addr}, {"deployments", list}};
  }
  return {{"error", errors.empty() ? std::string("no live scheduler in the cluster") : errors}};
}

void PrintDeployments(const json& d) {
  if (d.contains("error")) {
    std::printf("\ndeployments  unavailable: %s\n", d["error"].get<std::string>().c_str());
    return;
  }
  std::printf("\ndeployments (scheduler %s)\n", d["scheduler"].get<std::string>().c_str());
  if (d["deployments"].empty()) {
    std::printf("  none\n");
    return;
  }
  std::printf("%-24s %-32s %7s %7s %-12s %s\n", "NAME", "MODEL", "READY", "DESIRED", "ROLLOUT",
              "PENDING");
  for (const json& x : d["deployments"]) {
    const json st = x.value("status", json::object());
    const std::string rollout =
        st.empty() ? std::string("-")
                   : StrCat("wave ", st.value("wave", 0), " (", st.value("wave_target", 0), ")");
    std::string pending = StrCat(st.value("pending", 0));
    if (!st.value("reason", std::string()).empty()) {
      StrAppend(&pending, ": ", st.value("reason", std::string()));
    }
    std::printf("%-24s %-32s %7d %7d %-12s %s\n", x.value("name", "").c_str(),
                StrCat(x.value("model", "?"), "@", x.value("version", "?")).c_str(),
                st.value("ready", 0), st.value("desired", x.value("desired", 0)), rollout.c_str(),
                pending.c_str());
  }
}

int RunStatus(const ClusterCommands& c, bool as_json, const ClusterAccess& a) {
  pb::StatusResponse node;
  grpc::Status s = Admin(a.addr)->Status(MakeContext(a, a.timeout).get(), {}, &node);
  if (!s.ok()) return RpcFailure(a.addr, s);
  if (c.node_only) {
    if (as_json) {
      std::cout << NodeJson(node).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    } else {
      PrintNode(node);
    }
    return 0;
  }
  pb::MembersResponse members;
  json cluster;
  s = Admin(a.addr)->Members(MakeContext(a, a.timeout).get(), {}, &members);
  std::vector<pb::MemberInfo> nodes(members.members().begin(), members.members().end());
  std::sort(nodes.begin(), nodes.end(), [](const auto& x, const auto& y) {
    return std::make_tuple(RoleRank(x), x.rack(), x.node_id()) <
           std::make_tuple(RoleRank(y), y.rack(), y.node_id());
  });
  if (s.ok()) {
    cluster = MembersJson(nodes);
  } else {
    cluster = {{"error", StrCat("members: ", s.error_message())}};
  }
  cluster["deployments"] = Deployments(a, WithRole(members, "scheduler", node.node_id(), a.addr));
  json alerts;
  auto found = FetchAlerts(a, kExtraTimeout);
  if (found.ok()) {
    json firing = json::array();
    for (const pb::Alert& alert : found->response.alerts()) {
      if (alert.state() != "resolved") firing.push_back(AlertJson(alert));
    }
    alerts = {
        {"observer", found->response.node_id()}, {"address", found->addr}, {"alerts", firing}};
  } else {
    alerts = {{"error", std::string(found.status().message())}};
  }
  cluster["alerts"] = alerts;
  if (as_json) {
    json out = NodeJson(node);
    out["cluster"] = cluster;
    std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
  }
  PrintNode(node);
  if (cluster.contains("error")) {
    std::printf("\ncluster  unavailable: %s\n", cluster["error"].get<std::string>().c_str());
  } else {
    PrintMembers(nodes, cluster);
  }
  PrintDeployments(cluster["deployments"]);
  if (alerts.contains("error")) {
    std::printf("\nalerts  unavailable: %s\n", alerts["error"].get<std::string>().c_str());
  } else {
    int firing = 0, pending = 0;
    for (const pb::Alert& alert : found->response.alerts()) {
      firing += alert.state() == "firing" ? 1 : 0;
      pending += alert.state() == "pending" ? 1 : 0;
    }
    std::printf("\nalerts (observer %s): %d firing, %d pending\n",
                found->response.node_id().c_str(), firing, pending);
    if (firing + pending > 0) PrintAlertRows(found->response, true);
  }
  return 0;
}

}  // namespace

void AddClusterCommands(CLI::App& app, ClusterCommands* c) {
  c->status = app.add_subcommand(
      "status",
      "the node at --addr, then the cluster: nodes by role and rack, deployments, firing alerts");
  c->status->add_flag("--node", c->node_only, "only the node at --addr");
  c->alerts = app.add_subcommand(
      "alerts",
      "pending, firing and recently resolved alerts (the observer at --addr, or one it knows)");
  AddRoutingCommand(app, &c->routing);
}

void PrintMemberList(std::vector<pb::MemberInfo> members, bool as_json) {
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.node_id() < b.node_id(); });
  if (as_json) {
    json out = json::array();
    for (const auto& m : members) {
      out.push_back({{"node_id", m.node_id()},
                     {"address", m.address()},
                     {"state", m.state()},
                     {"incarnation", m.incarnation()},
                     {"roles", std::vector<std::string>(m.roles().begin(), m.roles().end())},
                     {"rack", m.rack()},
                     {"state_age_seconds", m.state_age_seconds()},
                     {"taints", std::vector<std::string>(m.taints().begin(), m.taints().end())},
                     {"gpus",
                      {{"count", m.gpu_count()},
                       {"class", m.gpu_class()},
                       {"nvlink_domain", m.nvlink_domain()}}}});
    }
    std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return;
  }
  Table table({"ID", "ADDRESS", "STATE", "INCARNATION", "ROLES", "RACK", "AGE", "GPUS / TAINTS"},
              {3});
  for (const auto& m : members) {
    std::string roles, extra = m.gpu_count() > 0 ? Gpus(m) : "";
    for (const auto& r : m.roles()) StrAppend(&roles, roles.empty() ? "" : ",", r);
    for (const auto& t : m.taints()) StrAppend(&extra, extra.empty() ? "" : " ", "[", t, "]");
    table.Add({m.node_id(), m.address(), m.state(), StrCat(m.incarnation()), roles, m.rack(),
               DurationToString(absl::Seconds(static_cast<int64_t>(m.state_age_seconds()))),
               extra});
  }
  table.Print();
}

std::optional<int> RunClusterCommands(const ClusterCommands& c, bool json,
                                      const ClusterAccess& cluster) {
  if (c.status != nullptr && c.status->parsed()) return RunStatus(c, json, cluster);
  if (c.alerts != nullptr && c.alerts->parsed()) return RunAlerts(json, cluster);
  return RunRoutingCommand(c.routing, json, cluster);
}

}  // namespace exa::tools
