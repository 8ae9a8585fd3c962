#include "tools/scheduler_commands.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "common/file_util.h"
#include "common/strings.h"
#include "common/units.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "exaserve/v1/scheduler.grpc.pb.h"
#include "net/tls.h"
#include "nlohmann/json.hpp"
#include "scheduler/spec.h"
#include "tools/cli_common.h"

namespace exa::tools {
namespace {

namespace pb = exaserve::v1;
using nlohmann::json;

// INVALID_ARGUMENT (and an unknown model on apply) is the caller's input: exit 2.
int Failure(const ClusterAccess& cluster, const grpc::Status& s, bool input_error_is_usage) {
  std::string message = s.error_message();
  if (s.error_code() == grpc::UNIMPLEMENTED) {
    std::string schedulers;
    for (const auto& [id, addr] : AliveSchedulers(cluster.addr, absl::Seconds(2))) {
      StrAppend(&schedulers, schedulers.empty() ? "" : ", ", id, " (", addr, ")");
    }
    message = schedulers.empty()
                  ? "this node runs no scheduler, and knows of none alive; point --addr at a "
                    "scheduler node"
                  : StrCat("this node runs no scheduler; point --addr at one: ", schedulers);
  }
  RpcFailure(cluster.addr, s, message);
  if (s.error_code() == grpc::INVALID_ARGUMENT) return 2;
  if (input_error_is_usage && s.error_code() == grpc::NOT_FOUND) return 2;
  return 1;
}

std::unique_ptr<pb::Scheduler::Stub> Stub(const ClusterAccess& cluster) {
  return pb::Scheduler::NewStub(net::NewChannel(cluster.addr));
}

// --resource-version: a Raft index as `get` shows it; nullopt (after saying why) when malformed.
std::optional<uint64_t> FlagVersion(std::string_view command, const std::string& text) {
  std::optional<uint64_t> v = scheduler::ParseResourceVersion(text);
  if (!v) {
    Usage(StrCat(command, ": --resource-version \"", text,
                 "\": expected a non-negative integer (the VERSION column of `get`)"));
  }
  return v;
}

// The versions an apply names: --resource-version for a file of one spec (the file's own
// metadata.resourceVersion travels in the YAML). False, after saying why, on a usage error.
bool NameVersions(const SchedulerCommands& c,
                  const std::vector<scheduler::InferenceReplicaSpec>& specs,
                  pb::ApplyRequest* request) {
  if (c.apply_version->count() == 0) return true;
  std::optional<uint64_t> version = FlagVersion("apply", c.resource_version);
  if (!version) return false;
  if (specs.size() != 1) {
    Usage(StrCat("apply: --resource-version names the version of one spec, but ", c.file, " holds ",
                 specs.size(), "; put metadata.resourceVersion in each document instead"));
    return false;
  }
  (*request->mutable_resource_versions())[specs.front().name] = *version;
  return true;
}

int RunApply(const SchedulerCommands& c, bool as_json, const ClusterAccess& cluster) {
  // Bounded: /dev/zero or a wrong file must not fill memory. The scheduler takes at most its
  // gRPC message size (16 MiB by default); a spec file is a few KiB.
  std::error_code ec;
  if (std::filesystem::is_directory(c.file, ec)) {
    return Usage(StrCat("apply: -f ", c.file, ": is a directory, not a spec file"));
  }
  absl::StatusOr<std::string> text = ReadFile(c.file, scheduler::kMaxSpecFileBytes);
  if (text.status().code() == absl::StatusCode::kNotFound) {
    return Usage(StrCat("apply: -f ", c.file, ": cannot read the file"));
  }
  if (text.status().code() == absl::StatusCode::kInvalidArgument) {
    return Usage(StrCat("apply: -f ", c.file, ": larger than ", scheduler::kMaxSpecFileBytes,
                        " bytes; a spec file is a few KiB"));
  }
  if (!text.ok()) return Usage(StrCat("apply: -f ", text.status().message()));
  // Checked here first: a bad spec is named without a round trip (the scheduler checks again).
  auto specs = scheduler::ParseSpecs(*text, c.file);
  if (!specs.ok()) return Usage(std::string(specs.status().message()));
  pb::ApplyRequest request;
  if (!NameVersions(c, *specs, &request)) return kUsageExitCode;
  request.set_yaml(*text);
  request.set_source(c.file);
  request.set_dry_run(c.dry_run);
  pb::ApplyResponse response;
  grpc::Status s = Stub(cluster)->Apply(MakeContext(cluster).get(), request, &response);
  if (!s.ok()) return Failure(cluster, s, true);
  json out = json::array();
  for (const pb::SpecChange& ch : response.changes()) {
    if (as_json) {
      out.push_back({{"name", ch.name()}, {"action", ch.action()}, {"diff", ch.diff()}});
      continue;
    }
    std::cout << "inferencereplica/" << ch.name() << " " << ch.action()
              << (c.dry_run ? " (dry run)" : "") << "\n"
              << ch.diff();
  }
  if (as_json) std::cout << out.dump() << "\n";
  return 0;
}

int RunGet(const SchedulerCommands& c, bool as_json, const ClusterAccess& cluster) {
  if (c.output != "yaml" && c.output != "table") {
    return Usage(StrCat("get: -o ", c.output, ": expected yaml or table"));
  }
  pb::GetSpecsRequest request;
  request.set_name(c.name);
  pb::GetSpecsResponse response;
  grpc::Status s = Stub(cluster)->GetSpecs(MakeContext(cluster).get(), request, &response);
  if (!s.ok()) return Failure(cluster, s, false);
  if (as_json) {
    json out = json::array();
    for (const pb::StoredSpec& spec : response.specs()) {
      out.push_back({{"name", spec.name()},
                     {"yaml", spec.yaml()},
                     {"version", spec.version()},
                     {"resource_version", spec.resource_version()}});
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  if (c.output == "yaml") {
    bool first = true;
    for (const pb::StoredSpec& stored : response.specs()) {
      // With metadata.resourceVersion, so that an edited copy applies only over this version.
      auto specs = scheduler::ParseSpecs(stored.yaml(), stored.name());
      std::cout << (first ? "" : "---\n")
                << (specs.ok() && specs->size() == 1
                        ? scheduler::SpecToYaml(specs->front(), stored.resource_version())
                        : stored.yaml());
      first = false;
    }
    return 0;
  }
  std::printf("%-32s %-28s %9s %-8s %7s\n", "NAME", "MODEL", "REPLICAS", "BACKEND", "VERSION");
  for (const pb::StoredSpec& stored : response.specs()) {
    auto specs = scheduler::ParseSpecs(stored.yaml(), stored.name());
    if (!specs.ok() || specs->size() != 1) continue;
    const scheduler::InferenceReplicaSpec& spec = specs->front();
    std::printf("%-32s %-28s %9d %-8s %7s\n", spec.name.c_str(),
                StrCat(spec.model, "@", spec.version).c_str(), spec.replicas, spec.backend.c_str(),
                StrCat(stored.resource_version()).c_str());
  }
  return 0;
}

std::string MetricText(const json& a, const json& v) {
  if (!v.is_number()) return "none reported";
  const double x = v.get<double>();
  if (a.value("unit", "") == "tokens") return StrCat(std::llround(x), " tokens");
  return StrCat(std::llround(x * 1000), " ms");
}

// The scheduler's Describe of spec `c.name`; its exit code when the call fails.
std::optional<int> Describe(const SchedulerCommands& c, const ClusterAccess& cluster,
                            pb::DescribeResponse* response) {
  pb::DescribeRequest request;
  request.set_name(c.name);
  grpc::Status s = Stub(cluster)->Describe(MakeContext(cluster).get(), request, response);
  if (!s.ok()) return Failure(cluster, s, false);
  return std::nullopt;
}

// Describe's "autoscaling" part, and the autoscaler's events.
int RunAutoscaleStatus(const SchedulerCommands& c, bool as_json, const ClusterAccess& cluster) {
  pb::DescribeResponse response;
  if (std::optional<int> failed = Describe(c, cluster, &response)) return *failed;
  json d = json::parse(response.json(), nullptr, false);
  if (d.is_discarded() || !d.contains("autoscaling")) {
    std::cerr << "exaserve-cli: " << c.name
              << " is not autoscaled (no spec.autoscaling), or its scheduler has not stepped "
                 "it yet\n";
    return 1;
  }
  json a = d["autoscaling"];
  json decisions = json::array();
  for (const json& e : d["events"]) {
    if (e.value("message", "").rfind("autoscaler:", 0) == 0) decisions.push_back(e);
  }
  if (as_json) {
    a["decisions"] = decisions;
    std::cout << a.dump() << "\n";
    return 0;
  }
  std::cout << "Name:       " << c.name << "\n"
            << "Replicas:   " << a.value("current", 0) << " in force, " << a.value("desired", 0)
            << " wanted, " << a.value("ready", 0) << " ready (bounds " << a.value("min_replicas", 0)
            << "-" << a.value("max_replicas", 0) << ")\n"
            << "Metric:     " << a.value("metric", "") << " " << MetricText(a, a["value"])
            << " against a target of " << MetricText(a, a["target"])
            << (a.value("panic", false) ? " (panic: a burst)" : "") << "\n"
            << "Now:        " << a.value("reason", "") << "\n";
  if (a["last_decision"].is_object()) {
    const json& l = a["last_decision"];
    std::cout << "Stored:     " << l.value("desired", 0) << " at " << l.value("at", "") << " ("
              << l.value("reason", "") << ")\n";
  }
  if (a["last_scale_up"].is_object()) {
    const json& u = a["last_scale_up"];
    std::cout << "Scale-up:   the last, to " << u.value("to", 0) << " replicas, was ready after "
              << u.value("time_to_ready_s", 0.0) << " s\n";
  }
  std::cout << "Decisions:\n";
  for (const json& e : decisions) {
    std::cout << "  " << e.value("time", "") << "  " << e.value("message", "") << "\n";
  }
  return 0;
}

int RunDescribe(const SchedulerCommands& c, bool as_json, const ClusterAccess& cluster) {
  pb::DescribeResponse response;
  if (std::optional<int> failed = Describe(c, cluster, &response)) return *failed;
  json d = json::parse(response.json(), nullptr, false);
  if (as_json || d.is_discarded()) {
    std::cout << response.json() << "\n";
    return 0;
  }
  const json& st = d["status"];
  std::cout << "Name:        " << d.value("name", "") << "\n"
            << "Version:     " << d.value("resource_version", uint64_t{0})
            << " (resource version)\n"
            << "Reconciler:  " << d.value("reconciler", "") << " (described by "
            << d.value("described_by", "") << ")\n";
  if (st.is_object() && !st.empty()) {
    std::cout << "Replicas:    " << st.value("ready", 0) << " ready, " << st.value("present", 0)
              << " present, " << st.value("desired", 0) << " desired (" << st.value("lost", 0)
              << " on unreachable nodes, " << st.value("failed", 0) << " failed)\n"
              << "Wave:        " << st.value("wave", 0) << " (up to " << st.value("wave_target", 0)
              << " replicas)\n";
    if (st.value("stopping", 0) > 0) {
      std::cout << "Stopping:    " << st.value("stopping", 0)
                << " (draining after a stop; an ordinal restarted in place waits for it)\n";
    }
    if (st.value("pending", 0) > 0 || !st.value("reason", std::string()).empty()) {
      std::cout << "Pending:     " << st.value("pending", 0) << ": "
                << st.value("reason", std::string()) << "\n";
    }
  }
  std::cout << "Placed:\n";
  for (const json& r : d["replicas"]) {
    std::cout << "  " << r.value("id", "") << "  " << r.value("node", "") << "  generation "
              << r.value("generation", 0) << "  " << r.value("phase", "") << "  (node "
              << r.value("node_state", "") << ")\n";
  }
  std::cout << "Events:\n";
  for (const json& e : d["events"]) {
    std::cout << "  " << e.value("time", "") << "  " << e.value("message", "") << "\n";
  }
  return 0;
}

int RunDelete(const SchedulerCommands& c, const ClusterAccess& cluster) {
  pb::DeleteSpecRequest request;
  request.set_name(c.name);
  if (c.delete_version->count() > 0) {
    std::optional<uint64_t> version = FlagVersion("delete", c.resource_version);
    if (!version) return kUsageExitCode;
    request.set_resource_version(*version);
  }
  pb::DeleteSpecResponse response;
  grpc::Status s = Stub(cluster)->DeleteSpec(MakeContext(cluster).get(), request, &response);
  if (!s.ok()) return Failure(cluster, s, false);
  std::cout << "inferencereplica/" << c.name << " deleted\n";
  return 0;
}

int RunNodeOp(const SchedulerCommands& c, pb::NodeOpRequest::Op op, bool as_json,
              const ClusterAccess& cluster) {
  pb::NodeOpRequest request;
  request.set_node(c.node);
  request.set_op(op);
  request.set_taint(c.taint_value);
  pb::NodeOpResponse response;
  grpc::Status s = Stub(cluster)->NodeOp(MakeContext(cluster).get(), request, &response);
  if (!s.ok()) return Failure(cluster, s, false);
  json all = json::parse(response.json(), nullptr, false);
  if (as_json || all.is_discarded()) {
    std::cout << response.json() << "\n";
    return 0;
  }
  for (const json& n : all) {
    if (op != pb::NodeOpRequest::OP_LIST && n.value("node", "") != c.node) continue;
    std::string taints;
    for (const json& t : n["taints"])
      StrAppend(&taints, taints.empty() ? "" : ",", t.get<std::string>());
    std::cout << n.value("node", "") << (n.value("draining", false) ? "  draining" : "")
              << (n.value("cordoned", false) ? "  cordoned" : "  schedulable")
              << (taints.empty() ? "" : "  taints=") << taints << "\n";
  }
  return 0;
}

std::string Ms(double seconds) { return StrCat(std::round(seconds * 10000) / 10, " ms"); }

int RunRollout(const SchedulerCommands& c, bool as_json, const ClusterAccess& cluster) {
  pb::RolloutRequest request;
  request.set_name(c.name);
  request.set_command(c.rollout_command);
  pb::RolloutResponse response;
  grpc::Status s = Stub(cluster)->Rollout(MakeContext(cluster).get(), request, &response);
  if (!s.ok()) return Failure(cluster, s, false);
  json r = json::parse(response.json(), nullptr, false);
  if (as_json || r.is_discarded()) {
    std::cout << response.json() << "\n";
    return 0;
  }
  if (c.rollout_command != "status") {
    std::cout << "rollout " << c.rollout_command << " of " << c.name
              << " stored; the reconciler applies it at its next step\n";
    return 0;
  }
  const std::string phase = r.value("phase", "idle");
  std::cout << "Deployment:  " << r.value("name", "") << " (spec version "
            << r.value("spec_version", "") << ")\n"
            << "Stable:      " << r.value("stable", "") << "\n";
  if (!r.value("target", std::string()).empty()) {
    std::cout << "Rolling to:  " << r.value("target", "") << "\n";
  }
  std::string stages;
  for (const json& n : r["stages"]) StrAppend(&stages, stages.empty() ? "" : " → ", n.get<int>());
  const int stage = std::min<int>(r.value("stage", 0) + 1, static_cast<int>(r["stages"].size()));
  std::cout << "Phase:       " << phase << (r.value("paused", false) ? " (paused)" : "")
            << (phase == "succeeded" ? ", every stage" : StrCat(", stage ", stage)) << " of "
            << r["stages"].size() << " [" << stages << "], observe " << r.value("observe_s", 0.0)
            << " s, threshold +" << std::round(r.value("threshold", 0.0) * 1000) / 10 << "%\n";
  std::cout << "Ready:      ";
  for (const auto& [v, n] : r["ready"].items()) std::cout << " " << v << "=" << n.get<int>();
  std::cout << "\n";
  if (!r.value("failure", std::string()).empty()) {
    std::cout << "Rolled back: " << r.value("failure", "") << "\n";
  }
  auto print_metrics = [](const json& metrics) {
    for (const json& m : metrics) {
      const std::string name = m.value("metric", "");
      auto fmt = [&](double v) {
        return name == "memory"      ? BytesToString(static_cast<uint64_t>(v))
               : name == "errorRate" ? StrCat(std::round(v * 10000) / 100, "%")
                                     : Ms(v);
      };
      std::cout << "    " << name << ": old " << fmt(m.value("old", 0.0)) << " ("
                << m.value("old_samples", 0) << " samples), new " << fmt(m.value("new", 0.0))
                << " (" << m.value("new_samples", 0) << " samples)"
                << (m.value("regressed", false) ? "  REGRESSED"
                    : m.value("judged", false)  ? "  ok"
                                                : "  (too few samples)")
                << "\n";
    }
  };
  if (!r["window_so_far"].empty()) {
    std::cout << "Current window:\n";
    print_metrics(r["window_so_far"]);
  }
  for (const json& d : r["decisions"]) {
    std::cout << "Stage " << d.value("stage", 0) + 1 << " (" << d.value("replicas", 0)
              << " replicas): " << d.value("decision", "") << "\n";
    print_metrics(d["metrics"]);
  }
  return 0;
}

}  // namespace

std::map<std::string, std::string> AliveSchedulers(const std::string& addr,
                                                   absl::Duration timeout) {
  auto stub = pb::Admin::NewStub(net::NewChannel(addr));
  pb::MembersResponse members;
  std::map<std::string, std::string> out;
  if (!stub->Members(MakeContext({addr, "", timeout}).get(), {}, &members).ok()) return out;
  for (const auto& m : members.members()) {
    if (m.state() != "alive" || m.grpc_address().empty()) continue;
    if (std::find(m.roles().begin(), m.roles().end(), "scheduler") == m.roles().end()) continue;
    out[m.node_id()] = m.grpc_address();
  }
  return out;
}

void AddSchedulerCommands(CLI::App& app, CLI::App& node_cmd, SchedulerCommands* c) {
  c->apply = app.add_subcommand(
      "apply",
      "create or update InferenceReplica specs on the scheduler at --addr (prints a diff)");
  c->apply->add_option("-f,--file", c->file, "spec YAML (one or more documents)")->required();
  c->apply->add_flag("--dry-run", c->dry_run, "validate and diff only");
  c->apply_version = c->apply->add_option(
      "--resource-version", c->resource_version,
      "write only if the spec is still at this version (as `get` shows it; 0: must not exist); "
      "a file of one spec");
  c->get = app.add_subcommand("get", "InferenceReplica specs stored on the schedulers");
  c->get->add_option("name", c->name, "one spec (default: all)");
  c->get->add_option("-o,--output", c->output, "table (default) or yaml");
  c->output = "table";
  c->describe = app.add_subcommand(
      "describe", "a deployment: status, where its replicas are, recent events (why pending...)");
  c->describe->add_option("name", c->name, "spec name")->required();
  c->del = app.add_subcommand("delete", "delete a spec; its replicas are stopped");
  c->del->add_option("name", c->name, "spec name")->required();
  c->delete_version =
      c->del->add_option("--resource-version", c->resource_version,
                         "delete only if the spec is still at this version (as `get` shows it)");
  c->cordon = node_cmd.add_subcommand("cordon", "no new replicas on NODE (scheduler at --addr)");
  c->uncordon = node_cmd.add_subcommand("uncordon", "NODE takes new replicas again");
  c->drain = node_cmd.add_subcommand(
      "drain",
      "cordon NODE and move its replicas away; refused when a deployment would fall "
      "below 99 % of its desired replicas ready");
  c->taint = node_cmd.add_subcommand("taint", "taint NODE: no new replicas until untainted");
  c->untaint = node_cmd.add_subcommand("untaint", "remove a taint from NODE");
  for (CLI::App* sub : {c->cordon, c->uncordon, c->drain, c->taint, c->untaint}) {
    sub->add_option("node", c->node, "node id")->required();
  }
  for (CLI::App* sub : {c->taint, c->untaint}) {
    sub->add_option("taint", c->taint_value, "e.g. maintenance")->required();
  }
  c->ops = node_cmd.add_subcommand("ops", "nodes cordoned, draining or tainted by operators");
  c->rollout = app.add_subcommand(
      "rollout",
      "a deployment's release: status (stages, per-metric comparison), pause, resume, "
      "promote (skip the wait), rollback");
  c->rollout->add_option("command", c->rollout_command, "status|pause|resume|promote|rollback")
      ->required()
      ->check(CLI::IsMember({"status", "pause", "resume", "promote", "rollback"}));
  c->rollout->add_option("name", c->name, "spec name")->required();
  c->autoscale = app.add_subcommand(
      "autoscale",
      "an autoscaled deployment: status (the count in force and wanted, the metric against its "
      "target, the last decisions and why)");
  c->autoscale->add_option("command", c->autoscale_command, "status")
      ->required()
      ->check(CLI::IsMember({"status"}));
  c->autoscale->add_option("name", c->name, "spec name")->required();
}

std::optional<int> RunSchedulerCommands(const SchedulerCommands& c, bool json,
                                        const ClusterAccess& cluster) {
  using Op = pb::NodeOpRequest;
  if (c.apply->parsed()) return RunApply(c, json, cluster);
  if (c.get->parsed()) return RunGet(c, json, cluster);
  if (c.describe->parsed()) return RunDescribe(c, json, cluster);
  if (c.del->parsed()) return RunDelete(c, cluster);
  if (c.cordon->parsed()) return RunNodeOp(c, Op::OP_CORDON, json, cluster);
  if (c.uncordon->parsed()) return RunNodeOp(c, Op::OP_UNCORDON, json, cluster);
  if (c.drain->parsed()) return RunNodeOp(c, Op::OP_DRAIN, json, cluster);
  if (c.taint->parsed()) return RunNodeOp(c, Op::OP_TAINT, json, cluster);
  if (c.untaint->parsed()) return RunNodeOp(c, Op::OP_UNTAINT, json, cluster);
  if (c.ops->parsed()) return RunNodeOp(c, Op::OP_LIST, json, cluster);
  if (c.rollout->parsed()) return RunRollout(c, json, cluster);
  if (c.autoscale->parsed()) return RunAutoscaleStatus(c, json, cluster);
  return std::nullopt;
}

}  // namespace exa::tools
