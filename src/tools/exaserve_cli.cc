// exaserve-cli: the operator's tool. Talks to any node's gRPC Admin API.
//
// Exit codes: 0 success, 1 the node could not be reached or answered with an error, 2 usage.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "chat_template/render_lines.h"
#include "cluster/label_rule.h"
#include "common/chars.h"
#include "common/check.h"
#include "common/file_util.h"
#include "common/host_port.h"
#include "common/malloc_tuning.h"
#include "common/strings.h"
#include "common/units.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "exaserve/v1/inference.grpc.pb.h"
#include "exaserve/v1/node.grpc.pb.h"
#include "exaserve/v1/scheduler.grpc.pb.h"
#include "gateway/api_keys.h"
#include "membership/agent/keyring.h"
#include "net/cert_authority.h"
#include "net/tls.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"
#include "tools/cli_plan.h"
#include "tools/cluster_commands.h"
#include "tools/generate_command.h"
#include "tools/model_commands.h"
#include "tools/scheduler_commands.h"
#include "tools/security_commands.h"
#include "tools/table.h"
#include "tools/text_commands.h"

namespace {

using exa::tools::ParsePairs;
using exa::tools::Usage;

struct GlobalOptions {
  std::string addr = "127.0.0.1:7070";
  std::string timeout = "5s";
  bool json = false;
  absl::Duration timeout_duration = absl::Seconds(5);
  std::string token;     // API key or admin token, sent as "authorization: Bearer ..."
  std::string data_dir;  // where a node on this host keeps its admin token

  exa::tools::ClusterAccess Access() const { return {addr, token, timeout_duration}; }
};

int RpcFailure(const GlobalOptions& g, const grpc::Status& s) {
  // A service a node does not register (it lacks the role) answers UNIMPLEMENTED, empty.
  if (s.error_code() == grpc::UNIMPLEMENTED && s.error_message().empty()) {
    return exa::tools::RpcFailure(
        g.addr, s,
        "this node does not serve that call: it lacks the role that does (inference for "
        "replica commands, scheduler for specs; `exaserve-cli members` lists roles)");
  }
  return exa::tools::RpcFailure(g.addr, s);
}

std::unique_ptr<grpc::ClientContext> MakeContext(const GlobalOptions& g) {
  return exa::tools::MakeContext(g.Access());
}

int RunMembers(const GlobalOptions& g) {
  auto stub = exaserve::v1::Admin::NewStub(exa::net::NewChannel(g.addr));
  exaserve::v1::MembersResponse response;
  auto ctx = MakeContext(g);
  grpc::Status s = stub->Members(ctx.get(), exaserve::v1::MembersRequest(), &response);
  if (!s.ok()) return RpcFailure(g, s);
  exa::tools::PrintMemberList({response.members().begin(), response.members().end()}, g.json);
  return 0;
}

int RunGossipKey(const GlobalOptions& g, exaserve::v1::GossipKeyRequest::Op op,
                 const std::string& key) {
  auto stub = exaserve::v1::Admin::NewStub(exa::net::NewChannel(g.addr));
  exaserve::v1::GossipKeyRequest request;
  request.set_op(op);
  request.set_key(key);
  exaserve::v1::GossipKeyResponse response;
  auto ctx = MakeContext(g);
  grpc::Status s = stub->GossipKey(ctx.get(), request, &response);
  if (s.error_code() == grpc::INVALID_ARGUMENT) return Usage(s.error_message());
  if (!s.ok()) return RpcFailure(g, s);
  for (int i = 0; i < response.keys_size(); ++i) {
    std::cout << response.keys(i) << (i == 0 ? "  (primary)" : "") << "\n";
  }
  return 0;
}

// `node burn-in`: the node at --addr runs the GPU burn-in now. Prints its JSON; exit 0 passed,
// 1 failed (the node is now tainted burn-in-failed) or could not run (no GPU: the message says).
int RunBurnIn(const GlobalOptions& g) {
  auto stub = exaserve::v1::Admin::NewStub(exa::net::NewChannel(g.addr));
  // A node that does not answer a quick call within --timeout is not given the burn-in's
  // minute: a silent or wrong address fails fast.
  exaserve::v1::StatusResponse status;
  if (grpc::Status s = stub->Status(MakeContext(g).get(), {}, &status); !s.ok()) {
    return RpcFailure(g, s);
  }
  exaserve::v1::BurnInResponse response;
  GlobalOptions slow = g;
  // The GEMM and copy tests take a few seconds per GPU: at least a minute unless --timeout says.
  slow.timeout_duration = std::max(g.timeout_duration, absl::Minutes(1));
  auto ctx = MakeContext(slow);
  grpc::Status s = stub->BurnIn(ctx.get(), {}, &response);
  if (!s.ok()) return RpcFailure(g, s);
  auto json = nlohmann::json::parse(response.json(), nullptr, false);
  std::cout << (json.is_discarded() ? response.json() : json.dump(2)) << "\n";
  if (!response.passed()) {
    std::cerr << "exaserve-cli: burn-in failed: "
              << (json.is_discarded() ? std::string() : json.value("failure", std::string()))
              << " (the node is tainted "
              << "burn-in-failed"
              << ")\n";
    return 1;
  }
  return 0;
}

// ---- Fan-out: admin calls to every live member (version labels and routes) --------------------

// The gRPC addresses of the live members the node at --addr knows (itself included).
absl::StatusOr<std::vector<std::string>> LiveNodeAddresses(const GlobalOptions& g) {
  auto stub = exaserve::v1::Admin::NewStub(exa::net::NewChannel(g.addr));
  exaserve::v1::MembersResponse members;
  auto ctx = MakeContext(g);
  grpc::Status s = stub->Members(ctx.get(), {}, &members);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  std::vector<std::string> out;
  for (const auto& m : members.members()) {
    if ((m.state() == "alive" || m.state() == "suspect") && !m.grpc_address().empty()) {
      out.push_back(m.grpc_address());
    }
  }
  if (out.empty()) out.push_back(g.addr);  // a node without gossip peers: just it
  return out;
}

// At most this many nodes are asked at once: a 256-node cluster answers in a few round trips,
// and a node that does not answer costs its --timeout once, not once per node after it.
constexpr size_t kFanOutParallel = 16;

// Asks every node in `nodes` (with --addr set to it) through `rpc`, up to kFanOutParallel at a
// time, then hands each answer to `handle` on this thread in the order of `nodes`. A node
// answering `skip` (it lacks the role) is passed over; any other failure is printed and counted.
// INVALID_ARGUMENT is the caller's mistake: returns 2. Otherwise returns 1 if any node failed,
// else 0, and sets *answered to the nodes that answered OK.
template <typename Response>
int FanOut(const GlobalOptions& g, const std::vector<std::string>& nodes,
           std::optional<grpc::StatusCode> skip,
           const std::function<grpc::Status(const GlobalOptions& node, Response* out)>& rpc,
           const std::function<void(const Response&)>& handle, int* answered = nullptr) {
  std::vector<Response> responses(nodes.size());
  std::vector<grpc::Status> statuses(nodes.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < nodes.size();) {
      GlobalOptions node = g;
      node.addr = nodes[i];
      statuses[i] = rpc(node, &responses[i]);
    }
  };
  std::vector<std::thread> threads;
  const size_t n_threads = std::min(kFanOutParallel, nodes.size());
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  int failures = 0, ok = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const grpc::Status& s = statuses[i];
    if (skip && s.error_code() == *skip) continue;
    if (s.error_code() == grpc::INVALID_ARGUMENT) return Usage(s.error_message());
    if (!s.ok()) {
      GlobalOptions node = g;
      node.addr = nodes[i];
      RpcFailure(node, s);
      failures++;
      continue;
    }
    handle(responses[i]);
    ok++;
  }
  if (answered != nullptr) *answered = ok;
  return failures > 0 ? 1 : 0;
}

// LiveNodeAddresses, or the failure printed (exit code 1).
std::optional<std::vector<std::string>> LiveNodesOrReport(const GlobalOptions& g) {
  auto nodes = LiveNodeAddresses(g);
  if (nodes.ok()) return *std::move(nodes);
  RpcFailure(g,
             grpc::Status(grpc::UNAVAILABLE, "members: " + std::string(nodes.status().message())));
  return std::nullopt;
}

struct LabelOptions {
  std::vector<std::string> selector, labels, remove;
  std::string version;
};

// The gRPC address of the lowest-id alive scheduler in the membership view of the node at
// --addr; nullopt when there is none (or the node cannot be asked).
std::optional<std::string> FirstScheduler(const GlobalOptions& g) {
  auto schedulers = exa::tools::AliveSchedulers(g.addr, g.timeout_duration);
  if (schedulers.empty()) return std::nullopt;
  return schedulers.begin()->second;
}

// Sends a write the spec store keeps to the first scheduler the node at --addr sees. nullopt when
// the cluster has none, or its scheduler does not know the call (an older release): the caller
// then writes to the nodes alone. Otherwise the exit code, 0 or, after reporting the failure
// (behind `failure_prefix`), 2 for INVALID_ARGUMENT and 1 for the rest; `*scheduler` names it.
template <typename Call>
std::optional<int> WriteToScheduler(const GlobalOptions& g, std::string_view failure_prefix,
                                    std::string* scheduler, Call call) {
  std::optional<std::string> addr = FirstScheduler(g);
  if (!addr) return std::nullopt;
  auto stub = exaserve::v1::Scheduler::NewStub(exa::net::NewChannel(*addr));
  auto ctx = MakeContext(g);
  grpc::Status s = call(*stub, ctx.get());
  if (s.error_code() == grpc::UNIMPLEMENTED) return std::nullopt;
  *scheduler = *addr;
  if (s.ok()) return 0;
  GlobalOptions at = g;
  at.addr = *addr;
  std::cerr << failure_prefix;
  RpcFailure(at, s);
  return s.error_code() == grpc::INVALID_ARGUMENT ? 2 : 1;
}

// Sets labels on the matching replicas of every live node; prints each matched replica. With a
// scheduler in the cluster, also stores the rule in the spec store.
int RunReplicaLabel(const GlobalOptions& g, const LabelOptions& o) {
  exaserve::v1::LabelReplicasRequest request;
  std::map<std::string, std::string> selector, labels;
  if (!ParsePairs("--selector", o.selector, &selector)) return 2;
  if (!ParsePairs("--label", o.labels, &labels)) return 2;
  if (!o.version.empty()) labels["version"] = o.version;
  if (labels.empty() && o.remove.empty()) {
    return Usage("replica label: give --version, --label KEY=VALUE or --remove KEY");
  }
  request.mutable_selector()->insert(selector.begin(), selector.end());
  request.mutable_labels()->insert(labels.begin(), labels.end());
  for (const auto& k : o.remove) request.add_remove(k);
  auto nodes = LiveNodesOrReport(g);
  if (!nodes) return 1;
  int matched = 0;
  nlohmann::json out = nlohmann::json::array();
  int rc = FanOut<exaserve::v1::LabelReplicasResponse>(
      g, *nodes, grpc::FAILED_PRECONDITION,
      [&](const GlobalOptions& node, exaserve::v1::LabelReplicasResponse* response) {
        auto stub = exaserve::v1::Admin::NewStub(exa::net::NewChannel(node.addr));
        auto ctx = MakeContext(node);
        return stub->LabelReplicas(ctx.get(), request, response);
      },
      [&](const exaserve::v1::LabelReplicasResponse& response) {
        for (const auto& r : response.replicas()) {
          matched++;
          std::map<std::string, std::string> sorted(r.labels().begin(), r.labels().end());
          if (g.json) {
            out.push_back({{"replica_id", r.replica_id()}, {"labels", sorted}});
            continue;
          }
          std::string text;
          for (const auto& [k, v] : sorted) text += (text.empty() ? "" : ",") + k + "=" + v;
          std::cout << r.replica_id() << "  " << (text.empty() ? "-" : text) << "\n";
        }
      });
  if (rc == 2) return rc;
  if (g.json) std::cout << out.dump() << "\n";
  if (!g.json) std::cerr << matched << " replicas matched on " << nodes->size() << " nodes\n";
  // A cluster with schedulers keeps the rule in the spec store: replicas it starts later (a
  // rebuild, a scale-up) carry the labels, and a node that missed this call is relabelled.
  exaserve::v1::LabelRulesResponse rules;
  std::string scheduler;
  std::optional<int> stored = WriteToScheduler(
      g, "exaserve-cli: live replicas relabelled, but the rule is not stored: ", &scheduler,
      [&](exaserve::v1::Scheduler::Stub& stub, grpc::ClientContext* ctx) {
        return stub.LabelRules(ctx, request, &rules);
      });
  if (stored && *stored != 0) return *stored;
  if (stored && !g.json) {
    std::cerr << "stored on scheduler " << scheduler << " (" << rules.rules_size()
              << " label rules): replicas it starts carry them\n";
  }
  return rc;
}

struct RouteOptions {
  std::string header, target = "replica-version", default_value, remove;
};

// Sets or removes a version route on every gateway; lists the routes of the node at --addr.
void PrintRoutes(const GlobalOptions& g, const exaserve::v1::RoutesResponse& routes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : routes.routes()) {
    if (g.json) {
      out.push_back({{"header", r.header()}, {"label", r.label()}, {"default", r.default_value()}});
    } else {
      std::cout << r.header() << " -> label " << r.label()
                << (r.default_value().empty() ? "" : " (default " + r.default_value() + ")")
                << "\n";
    }
  }
  if (g.json) std::cout << out.dump() << "\n";
}

int RunGatewayRoute(const GlobalOptions& g, const RouteOptions& o, bool list) {
  exaserve::v1::RoutesRequest request;
  if (!list) {
    if (o.header.empty() == o.remove.empty()) {
      return Usage("gateway route: give --header H (with --target) or --remove H");
    }
    if (!o.remove.empty()) {
      request.set_op(exaserve::v1::RoutesRequest::OP_REMOVE);
      request.mutable_route()->set_header(o.remove);
    } else {
      std::string label;
      if (o.target == "replica-version") {
        label = "version";
      } else if (o.target.rfind("label:", 0) == 0 && o.target.size() > 6) {
        label = o.target.substr(6);
      } else {
        return Usage("--target \"" + o.target + "\": expected replica-version or label:KEY");
      }
      request.set_op(exaserve::v1::RoutesRequest::OP_SET);
      request.mutable_route()->set_header(o.header);
      request.mutable_route()->set_label(label);
      request.mutable_route()->set_default_value(o.default_value);
    }
  }
  if (!list) {
    // A cluster with schedulers keeps its routes in the spec store; every gateway follows it.
    exaserve::v1::RoutesResponse response;
    std::string scheduler;
    std::optional<int> stored = WriteToScheduler(
        g, "", &scheduler, [&](exaserve::v1::Scheduler::Stub& stub, grpc::ClientContext* ctx) {
          return stub.Routes(ctx, request, &response);
        });
    if (stored && *stored != 0) return *stored;
    if (stored) {
      std::cerr << "exaserve-cli: stored on scheduler " << scheduler
                << "; every gateway follows within 2 s\n";
      // When --addr is a gateway, return once it follows (so the next command sees it).
      auto gateway = exaserve::v1::Admin::NewStub(exa::net::NewChannel(g.addr));
      for (int i = 0; i < 50; ++i) {
        exaserve::v1::RoutesResponse now;
        auto c = MakeContext(g);
        if (!gateway->Routes(c.get(), {}, &now).ok()) break;
        if (now.SerializeAsString() == response.SerializeAsString()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      PrintRoutes(g, response);
      return 0;
    }
  }
  std::vector<std::string> nodes{g.addr};
  if (!list) {
    auto live = LiveNodesOrReport(g);
    if (!live) return 1;
    nodes = *std::move(live);
  }
  int gateways = 0;
  exaserve::v1::RoutesResponse last;
  // Listing asks one node, which must be a gateway; changing skips the nodes that are not.
  int rc = FanOut<exaserve::v1::RoutesResponse>(
      g, nodes, list ? std::nullopt : std::optional(grpc::FAILED_PRECONDITION),
      [&](const GlobalOptions& node, exaserve::v1::RoutesResponse* response) {
        auto stub = exaserve::v1::Admin::NewStub(exa::net::NewChannel(node.addr));
        auto ctx = MakeContext(node);
        return stub->Routes(ctx.get(), request, response);
      },
      [&](const exaserve::v1::RoutesResponse& response) { last = response; }, &gateways);
  if (rc == 2) return rc;
  if (gateways == 0 && rc == 0) {
    std::fprintf(stderr, "exaserve-cli: no gateway answered\n");
    return 1;
  }
  PrintRoutes(g, last);
  if (!list && !g.json) std::cerr << "applied on " << gateways << " gateways\n";
  return rc;
}

// Every replica in the cluster with its state and load (Node.ListReplicas on each live node).
// ---- Replica lifecycle on the node at --addr (the scheduler's StartReplica/StopReplica) --------

struct LifecycleOptions {
  std::string model;  // DIR or DIR@VERSION
  std::string pull;   // NAME, NAME@VERSION or NAME:VERSION, pulled through the node cache
  std::string id;
  int64_t generation = 0;
  std::string backend;
  int device = -1;
  std::string kv_cache_bytes, memory_budget, drain_timeout;
  std::vector<std::string> labels;
  bool now = false;
  bool wait = false;
  std::string wait_timeout = "5m";
};

nlohmann::json StatusJson(const exaserve::v1::ReplicaStatus& r) {
  return {{"replica_id", r.replica_id()},
          {"state", r.state()},
          {"reason", r.reason()},
          {"model", r.model()},
          {"version", r.version()},
          {"backend", r.backend()},
          {"device", r.device()},
          {"generation", r.generation()},
          {"memory_budget_bytes", r.memory_budget_bytes()}};
}

void PrintStatus(const GlobalOptions& g, const exaserve::v1::ReplicaStatus& r) {
  if (g.json) {
    std::cout << StatusJson(r).dump() << "\n";
  } else {
    std::cout << "replica " << r.replica_id() << ": " << r.state()
              << (r.reason().empty() ? "" : " (" + r.reason() + ")") << "\n";
  }
}

// Polls the node until replica `id` is in one of `states`; returns its last status.
std::optional<exaserve::v1::ReplicaStatus> WaitForState(const GlobalOptions& g,
                                                        const std::string& id,
                                                        const std::set<std::string>& states,
                                                        absl::Duration timeout) {
  auto stub = exaserve::v1::Node::NewStub(exa::net::NewChannel(g.addr));
  const absl::Time deadline = absl::Now() + timeout;
  std::optional<exaserve::v1::ReplicaStatus> last;
  while (absl::Now() < deadline) {
    exaserve::v1::ListReplicasResponse response;
    auto ctx = MakeContext(g);
    if (stub->ListReplicas(ctx.get(), {}, &response).ok()) {
      for (const auto& r : response.replicas()) {
        if (r.replica_id() != id) continue;
        last = r;
        if (states.count(r.state()) > 0) return last;
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return last;
}

// What replica start and stop share once the request is built: --wait-timeout checked, `call` on
// the node's Node service, then with --wait polling until replica `wait_id` (nullopt: the one the
// answer names) reaches one of `states`; prints the status and returns `exit_code` of it.
// INVALID_ARGUMENT from the node is a usage error.
int CallLifecycle(const GlobalOptions& g, const LifecycleOptions& o,
                  std::optional<std::string> wait_id, const std::set<std::string>& states,
                  const std::function<grpc::Status(exaserve::v1::Node::Stub&, grpc::ClientContext*,
                                                   exaserve::v1::ReplicaStatus*)>& call,
                  const std::function<int(const exaserve::v1::ReplicaStatus&)>& exit_code) {
  auto wait_timeout = exa::ParseDuration(o.wait_timeout);
  if (!wait_timeout.ok()) {
    return Usage("--wait-timeout " + std::string(wait_timeout.status().message()));
  }
  auto stub = exaserve::v1::Node::NewStub(exa::net::NewChannel(g.addr));
  exaserve::v1::ReplicaStatus status;
  auto ctx = MakeContext(g);
  grpc::Status s = call(*stub, ctx.get(), &status);
  if (s.error_code() == grpc::INVALID_ARGUMENT) return Usage(s.error_message());
  if (!s.ok()) return RpcFailure(g, s);
  if (o.wait) {
    auto last = WaitForState(g, wait_id.value_or(status.replica_id()), states, *wait_timeout);
    if (last) status = *last;
  }
  PrintStatus(g, status);
  return exit_code(status);
}

int RunReplicaStart(const GlobalOptions& g, const LifecycleOptions& o) {
  exaserve::v1::StartReplicaRequest req;
  if (!o.model.empty() && !o.pull.empty()) return Usage("give --model or --pull, not both");
  if (o.model.empty() && o.pull.empty())
    return Usage("--model DIR[@V] or --pull NAME[@V] is required");
  if (!o.model.empty()) {
    const size_t at = o.model.rfind('@');
    req.set_model_dir(o.model.substr(0, at));
    if (at != std::string::npos) req.set_version(o.model.substr(at + 1));
  } else {
    std::string name = o.pull, version;
    if (std::string e = exa::tools::SplitModelVersion("--pull", &name, &version); !e.empty())
      return Usage(e);
    req.set_model(name);
    req.set_version(version);
  }
  req.set_replica_id(o.id);
  req.set_generation(o.generation);
  req.set_backend(o.backend);
  if (o.device >= 0) req.set_device(o.device);
  for (const auto& [flag, text, setter] :
       {std::tuple<const char*, const std::string&,
                   void (exaserve::v1::StartReplicaRequest::*)(int64_t)>{
            "--kv-cache-bytes", o.kv_cache_bytes,
            &exaserve::v1::StartReplicaRequest::set_kv_cache_bytes},
        {"--memory-budget", o.memory_budget,
         &exaserve::v1::StartReplicaRequest::set_memory_budget_bytes}}) {
    if (text.empty()) continue;
    auto bytes = exa::ParseBytes(text);
    if (!bytes.ok()) return Usage(std::string(flag) + " " + std::string(bytes.status().message()));
    if (*bytes > static_cast<uint64_t>(INT64_MAX)) {
      return Usage(exa::StrCat(flag, " ", text, ": larger than 8Ei"));
    }
    (req.*setter)(static_cast<int64_t>(*bytes));
  }
  exa::cluster::Labels labels;
  for (const std::string& kv : o.labels) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Usage("--label " + kv + ": expected KEY=VALUE");
    labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // The node takes reserved keys (the scheduler sets them); an operator may not.
  if (absl::Status s = exa::cluster::ValidateChange(labels, {}); !s.ok()) {
    return Usage(exa::StrCat("--label ", s.message()));
  }
  req.mutable_labels()->insert(labels.begin(), labels.end());
  return CallLifecycle(
      g, o, std::nullopt, {"ready", "failed", "stopped"},
      [&](exaserve::v1::Node::Stub& stub, grpc::ClientContext* ctx,
          exaserve::v1::ReplicaStatus* status) { return stub.StartReplica(ctx, req, status); },
      [&](const exaserve::v1::ReplicaStatus& status) {
        return status.state() == "failed" || (o.wait && status.state() != "ready") ? 1 : 0;
      });
}

int RunReplicaStop(const GlobalOptions& g, const LifecycleOptions& o) {
  exaserve::v1::StopReplicaRequest req;
  req.set_replica_id(o.id);
  req.set_immediate(o.now);
  if (!o.drain_timeout.empty()) {
    auto d = exa::ParseDuration(o.drain_timeout);
    if (!d.ok()) return Usage("--drain-timeout " + std::string(d.status().message()));
    req.set_drain_timeout_seconds(absl::ToDoubleSeconds(*d));
  }
  return CallLifecycle(
      g, o, o.id, {"stopped", "failed"},
      [&](exaserve::v1::Node::Stub& stub, grpc::ClientContext* ctx,
          exaserve::v1::ReplicaStatus* status) { return stub.StopReplica(ctx, req, status); },
      [&](const exaserve::v1::ReplicaStatus& status) {
        return o.wait && status.state() != "stopped" ? 1 : 0;
      });
}

int RunReplicas(const GlobalOptions& g, bool local) {
  std::optional<std::vector<std::string>> nodes;
  if (local) {
    nodes = std::vector<std::string>{g.addr};
  } else {
    nodes = LiveNodesOrReport(g);
    if (!nodes) return 1;
  }
  nlohmann::json out = nlohmann::json::array();
  exa::tools::Table table({"REPLICA", "NODE", "STATE", "MODEL", "BACKEND", "RUN/WAIT", "PENDING",
                           "KV", "LABELS / REASON"},
                          {6, 7});
  // Nodes without the Node service (no inference role) answer UNIMPLEMENTED; asked alone
  // (--local), such a node is an error worth saying.
  using Response = exaserve::v1::ListReplicasResponse;
  int rc = FanOut<Response>(
      g, *nodes, local ? std::nullopt : std::optional(grpc::UNIMPLEMENTED),
      [&](const GlobalOptions& node, Response* response) {
        auto stub = exaserve::v1::Node::NewStub(exa::net::NewChannel(node.addr));
        auto ctx = MakeContext(node);
        return stub->ListReplicas(ctx.get(), {}, response);
      },
      [&](const Response& response) {
        for (const auto& r : response.replicas()) {
          std::map<std::string, std::string> labels(r.labels().begin(), r.labels().end());
          if (g.json) {
            out.push_back({{"replica_id", r.replica_id()},
                           {"node_id", response.node_id()},
                           {"state", r.state()},
                           {"reason", r.reason()},
                           {"model", r.model()},
                           {"version", r.version()},
                           {"backend", r.backend()},
                           {"labels", labels},
                           {"running", r.running_sequences()},
                           {"waiting", r.waiting_sequences()},
                           {"pending_tokens", r.pending_tokens()},
                           {"kv_blocks_used", r.kv_blocks_used()},
                           {"kv_blocks_total", r.kv_blocks_total()},
                           {"device", r.device()},
                           {"generation", r.generation()},
                           {"memory_budget_bytes", r.memory_budget_bytes()},
                           {"ttft_p99_ms", r.ttft_p99_ms()},
                           {"inter_token_p99_ms", r.inter_token_p99_ms()},
                           {"recent_finished", r.recent_finished()},
                           {"error_rate", r.error_rate()},
                           {"memory_bytes", r.memory_bytes()},
                           {"state_since_unix_ms", r.state_since_unix_ms()}});
            continue;
          }
          std::string extra;
          for (const auto& [k, v] : labels) extra += (extra.empty() ? "" : ",") + k + "=" + v;
          if (!r.reason().empty()) extra += (extra.empty() ? "" : "  ") + r.reason();
          table.Add({r.replica_id(), response.node_id(), r.state(), r.model() + "@" + r.version(),
                     r.backend(), exa::StrCat(r.running_sequences(), "/", r.waiting_sequences()),
                     exa::StrCat(r.pending_tokens()),
                     exa::StrCat(r.kv_blocks_used(), "/", r.kv_blocks_total()), extra});
        }
      });
  if (!g.json && rc != 2) table.Print();
  if (g.json && rc != 2) std::cout << out.dump() << "\n";
  return rc;
}

// ---- The command table ---------------------------------------------------------------------

// Where every flag lands, so the table's handlers share them (start and stop share
// LifecycleOptions, the keyring commands share `key`).
struct CliFlags {
  GlobalOptions g;
  exa::net::TlsOptions tls;
  exa::net::CertsInitOptions certs;
  std::string certs_nodes;
  exa::tools::GenerateOptions generate;
  exa::tools::TextCommands text;
  std::string key;
  bool replicas_local = false;
  LabelOptions label;
  LifecycleOptions life;
  RouteOptions route;
  exa::tools::PlanOptions plan;
  CLI::App* plan_cmd = nullptr;
  exa::tools::ModelCommands model;
  exa::tools::SchedulerCommands scheduler;
  exa::tools::ClusterCommands cluster;
};

// One entry of exaserve-cli: a command at `path` ("gossip key list") with its one-line help,
// its flags, and what runs it once it is the command given. An entry with an empty path is a
// module that adds its own commands to the root (model, plan, the scheduler's) and whose `run`
// answers nullopt unless one of them was given.
struct Command {
  std::string_view path;
  std::string_view help;
  std::function<void(CLI::App& cmd, CliFlags& f)> flags;
  std::function<std::optional<int>(CliFlags& f)> run;
  // certs init runs before --addr, --timeout and the TLS files are checked: it writes them.
  bool before_flag_checks = false;
  // A call to the public Inference API: --token is an API key, and a local node's admin token
  // is never sent in its place.
  bool public_api = false;
};

// Commands that only hold others: one of them must follow ("exaserve-cli gossip key list").
struct Group {
  std::string_view path;
  std::string_view help;
};

constexpr Group kGroups[] = {
    {"certs", "certificates for mutual TLS"},
    {"apikey", "API keys and admin tokens"},
    {"gossip", "gossip encryption keys"},
    {"gossip key", "manage the keyring of the node at --addr"},
    {"node",
     "node operations: burn-in (the node at --addr); cordon, drain, taint (through the "
     "scheduler at --addr)"},
    {"replica", "replicas across the cluster"},
    {"gateway", "gateway settings across the cluster"},
};

// A command with no flags of its own that runs `run` with the global options.
template <typename Run>
Command Simple(std::string_view path, std::string_view help, Run run) {
  return {path, help, nullptr, [run](CliFlags& f) -> std::optional<int> { return run(f); }};
}

void ReplicaLabelFlags(CLI::App& cmd, CliFlags& f) {
  cmd.add_option("--selector", f.label.selector,
                 "KEY=VALUE the replicas must match (repeatable; model=NAME, version=V)");
  cmd.add_option("--version", f.label.version, "set the version label");
  cmd.add_option("--label", f.label.labels, "KEY=VALUE to set (repeatable)");
  cmd.add_option("--remove", f.label.remove, "label KEY to remove (repeatable)");
}

void ReplicaStartFlags(CLI::App& cmd, CliFlags& f) {
  LifecycleOptions& life = f.life;
  cmd.add_option("--model", life.model, "model directory on that node, DIR[@VERSION]");
  cmd.add_option("--pull", life.pull,
                 "or a model NAME[@VERSION] the node pulls through its cache (rack "
                 "peer, then origin) before loading");
  cmd.add_option("--id", life.id, "replica id (default: <node>/<model>@<version>#<n>)");
  cmd.add_option("--generation", life.generation,
                 "generation; the same id and generation again is a no-op");
  cmd.add_option("--backend", life.backend, "cpu, cuda or sim (default: the node's)");
  cmd.add_option("--device", life.device, "cuda: the GPU (default: most free memory)");
  cmd.add_option("--kv-cache-bytes", life.kv_cache_bytes,
                 "KV cache, e.g. 2Gi (default: the node's)");
  cmd.add_option("--memory-budget", life.memory_budget,
                 "what the ledger holds for it besides shared weights (default: KV)");
  cmd.add_option("--label", life.labels, "KEY=VALUE (repeatable)");
  cmd.add_flag("--wait", life.wait, "wait until it is ready (exit 1 if it fails)");
  cmd.add_option("--wait-timeout", life.wait_timeout, "how long --wait waits (5m)");
}

void ReplicaStopFlags(CLI::App& cmd, CliFlags& f) {
  LifecycleOptions& life = f.life;
  cmd.add_option("id", life.id, "replica id")->required();
  cmd.add_flag("--now", life.now, "cancel its requests instead of draining them");
  cmd.add_option("--drain-timeout", life.drain_timeout,
                 "how long draining may take (default: the node's drain_timeout)");
  cmd.add_flag("--wait", life.wait, "wait until it has stopped");
  cmd.add_option("--wait-timeout", life.wait_timeout, "how long --wait waits (5m)");
}

void GatewayRouteFlags(CLI::App& cmd, CliFlags& f) {
  cmd.add_option("--header", f.route.header, "e.g. x-model-version");
  cmd.add_option("--target", f.route.target, "replica-version (the version label) or label:KEY");
  cmd.add_option("--default", f.route.default_value,
                 "label value for requests without the header (default: any)");
  cmd.add_option("--remove", f.route.remove, "remove the route for a header");
}

void CertsInitFlags(CLI::App& cmd, CliFlags& f) {
  cmd.add_option("--out", f.certs.out_dir, "directory to write into")->required();
  cmd.add_option("--nodes", f.certs_nodes, "comma list of node names, e.g. a,b,c")->required();
  cmd.add_option("--days", f.certs.days, "validity in days (default 365)");
  cmd.add_flag("--force", f.certs.force, "overwrite existing files");
}

void KeyFlag(CLI::App& cmd, CliFlags& f) { cmd.add_option("key", f.key, "base64 key")->required(); }

// `gossip key list|install|use|remove`.
Command GossipKey(std::string_view path, std::string_view help,
                  exaserve::v1::GossipKeyRequest::Op op) {
  return {path, help, op == exaserve::v1::GossipKeyRequest::OP_LIST ? nullptr : KeyFlag,
          [op](CliFlags& f) -> std::optional<int> { return RunGossipKey(f.g, op, f.key); }};
}

// Every command, in the order --help lists them.
// The commands that need no cluster state: credentials, keys, generation and tokenization.
std::vector<Command> LocalCommands() {
  using Op = exaserve::v1::GossipKeyRequest;
  return {
      {"certs init",
       "create a cluster CA, a certificate per node and one for this tool, plus a gossip key, an "
       "admin token and an API key, for a quick --secure set-up",
       CertsInitFlags,
       [](CliFlags& f) -> std::optional<int> {
         return exa::tools::RunCertsInit(f.certs, f.certs_nodes);
       },
       /*before_flag_checks=*/true},
      Simple("apikey new",
             "print a new key (give it to the client) and its hash line (for the key file)",
             [](CliFlags&) {
               std::string key = exa::gateway::ApiKeys::NewKey();
               std::cout << "key:  " << key << "\nhash: " << exa::gateway::ApiKeys::Sha256Hex(key)
                         << "\n";
               return 0;
             }),
      {"", "", [](CLI::App& app, CliFlags& f) { exa::tools::AddClusterCommands(app, &f.cluster); },
       [](CliFlags& f) {
         return exa::tools::RunClusterCommands(f.cluster, f.g.json, f.g.Access());
       }},
      {"generate", "generate text through a gateway (streams)",
       [](CLI::App& cmd, CliFlags& f) { exa::tools::AddGenerateFlags(cmd, &f.generate); },
       [](CliFlags& f) -> std::optional<int> {
         return exa::tools::RunGenerate(f.g.Access(), f.g.json, f.generate);
       },
       /*before_flag_checks=*/false, /*public_api=*/true},
      {"", "", [](CLI::App& app, CliFlags& f) { exa::tools::AddTextCommands(app, &f.text); },
       [](CliFlags& f) { return exa::tools::RunTextCommands(f.text); }},
      Simple("members", "the membership view of the node at --addr",
             [](CliFlags& f) { return RunMembers(f.g); }),
      Simple("gossip keygen", "print a new random base64 AES-256 key",
             [](CliFlags&) {
               std::cout << exa::membership::Keyring::GenerateBase64() << "\n";
               return 0;
             }),
      GossipKey("gossip key list", "installed keys, primary first", Op::OP_LIST),
      GossipKey("gossip key install", "add a key (decrypts, not yet used)", Op::OP_INSTALL),
      GossipKey("gossip key use", "make an installed key the primary", Op::OP_USE),
      GossipKey("gossip key remove", "remove a key that is not primary", Op::OP_REMOVE),
  };
}

// The commands that act on nodes, replicas, gateways and the scheduler's store.
std::vector<Command> ClusterTableCommands() {
  return {
      Simple("node burn-in",
             "run the GPU burn-in on the node at --addr now (GEMM TFLOP/s and copy bandwidth "
             "against the device class); failing taints it burn-in-failed. Exit 0 passed, 1 "
             "failed",
             [](CliFlags& f) { return RunBurnIn(f.g); }),
      {"replicas", "every replica in the cluster: state and load",
       [](CLI::App& cmd, CliFlags& f) {
         cmd.add_flag("--local", f.replicas_local,
                      "only the replicas of the node at --addr (no other node is asked: works "
                      "when the cluster is partitioned)");
       },
       [](CliFlags& f) -> std::optional<int> { return RunReplicas(f.g, f.replicas_local); }},
      {"replica label",
       "set labels (e.g. the version gateways route by) on matching replicas, every node",
       ReplicaLabelFlags,
       [](CliFlags& f) -> std::optional<int> { return RunReplicaLabel(f.g, f.label); }},
      {"replica start",
       "start a replica on the node at --addr (loads, warms up, then serves); refused when the "
       "node's memory ledger has no room",
       ReplicaStartFlags,
       [](CliFlags& f) -> std::optional<int> { return RunReplicaStart(f.g, f.life); }},
      {"replica stop", "take a replica out of routing, drain its requests and free its memory",
       ReplicaStopFlags,
       [](CliFlags& f) -> std::optional<int> { return RunReplicaStop(f.g, f.life); }},
      {"gateway route",
       "route requests carrying a header to replicas whose label matches its value",
       GatewayRouteFlags,
       [](CliFlags& f) -> std::optional<int> { return RunGatewayRoute(f.g, f.route, false); }},
      {"gateway routes", "the routes of the gateway at --addr", nullptr,
       [](CliFlags& f) -> std::optional<int> { return RunGatewayRoute(f.g, f.route, true); }},
      {"", "",
       [](CLI::App& app, CliFlags& f) { f.plan_cmd = exa::tools::AddPlanCommand(app, f.plan); },
       [](CliFlags& f) -> std::optional<int> {
         if (!f.plan_cmd->parsed()) return std::nullopt;
         return exa::tools::RunPlan(f.plan, f.g.json);
       }},
      {"", "", [](CLI::App& app, CliFlags& f) { exa::tools::AddModelCommands(app, &f.model); },
       [](CliFlags& f) { return exa::tools::RunModelCommands(f.model, f.g.json, f.g.Access()); }},
      // The scheduler's node operations (cordon, drain, taint) join the `node` group.
      {"", "",
       [](CLI::App& app, CliFlags& f) {
         exa::tools::AddSchedulerCommands(app, *app.get_subcommand("node"), &f.scheduler);
       },
       [](CliFlags& f) {
         return exa::tools::RunSchedulerCommands(f.scheduler, f.g.json, f.g.Access());
       }},
  };
}

std::vector<Command> Commands() {
  std::vector<Command> commands = LocalCommands();
  for (Command& c : ClusterTableCommands()) commands.push_back(std::move(c));
  return commands;
}

void AddGlobalFlags(CLI::App& app, CliFlags& f) {
  GlobalOptions& g = f.g;
  app.add_option("--addr", g.addr, "gRPC address of any node (default 127.0.0.1:7070)");
  app.add_option("--timeout", g.timeout,
                 "deadline for each call, e.g. 5s (default 5s); model pull and sync: each manifest "
                 "or listing request (chunk streams: --tier-timeout)");
  app.add_flag("--json", g.json, "print JSON instead of text");
  app.add_option("--token", g.token,
                 "API key or admin token (default: $EXASERVE_TOKEN), sent as a Bearer token");
  if (const char* env = std::getenv("EXASERVE_TOKEN")) g.token = env;
  app.add_option("--data-dir", g.data_dir,
                 "data dir of a node on this host, whose admin token is sent when --addr is this "
                 "host and no --token is given (default: $EXASERVE_NODE_DATA_DIR, "
                 "/var/lib/exaserve, ~/.local/state/exaserve)");
  // Mutual TLS toward a --secure cluster (exaserve-cli certs init writes client.pem).
  exa::net::TlsOptions& tls = f.tls;
  if (const char* env = std::getenv("EXASERVE_TLS_CA")) tls.ca_file = env;
  if (const char* env = std::getenv("EXASERVE_TLS_CERT")) tls.cert_file = env;
  if (const char* env = std::getenv("EXASERVE_TLS_KEY")) tls.key_file = env;
  app.add_option("--tls-ca", tls.ca_file, "PEM cluster CA (default: $EXASERVE_TLS_CA)");
  app.add_option("--tls-cert", tls.cert_file,
                 "PEM client certificate signed by the CA (default: $EXASERVE_TLS_CERT)");
  app.add_option("--tls-key", tls.key_file, "PEM key of --tls-cert (default: $EXASERVE_TLS_KEY)");
  app.add_option("--tls-server-name", tls.server_name,
                 "name checked on the server's certificate (default exaserve-node)");
}

// The global flags that need checking once parsed: TLS, --timeout, --addr. 0 when they are
// good, else the usage exit code after saying why.
int CheckGlobalFlags(CliFlags& f) {
  if (f.tls.enabled()) {
    if (absl::Status s = exa::net::UseClientTls(f.tls); !s.ok()) {
      return Usage(std::string(s.message()));
    }
  }
  auto timeout = exa::ParseDuration(f.g.timeout);
  if (!timeout.ok()) {
    return Usage(std::string("--timeout ") + std::string(timeout.status().message()));
  }
  if (std::string error = exa::HostPortError(f.g.addr); !error.empty()) {
    return Usage(exa::StrCat("--addr ", error));
  }
  f.g.timeout_duration = *timeout;
  return 0;
}

// The subcommand at `path` ("gossip key list"), made with its groups when they are new.
CLI::App* AddAt(CLI::App& app, std::string_view path, std::string_view help) {
  CLI::App* parent = &app;
  for (size_t start = 0;;) {
    const size_t space = std::min(path.find(' ', start), path.size());
    const std::string name(path.substr(start, space - start));
    if (space == path.size()) return parent->add_subcommand(name, std::string(help));
    const std::string_view group_path = path.substr(0, space);
    auto existing = parent->get_subcommands(
        std::function<bool(CLI::App*)>([&](CLI::App* s) { return s->get_name() == name; }));
    if (!existing.empty()) {
      parent = existing.front();
    } else {
      const auto* group = std::find_if(std::begin(kGroups), std::end(kGroups),
                                       [&](const Group& g) { return g.path == group_path; });
      EXA_CHECK(group != std::end(kGroups)) << "no group " << group_path << " in kGroups";
      parent = parent->add_subcommand(name, std::string(group->help));
      parent->require_subcommand(1);
    }
    start = space + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  exa::TuneMalloc();
  CLI::App app{"exaserve-cli: operate an ExaServe cluster"};
  app.require_subcommand(1);
  CliFlags f;
  AddGlobalFlags(app, f);
  const std::vector<Command> commands = Commands();
  std::vector<CLI::App*> apps;
  for (const Command& c : commands) {
    CLI::App* at = c.path.empty() ? &app : AddAt(app, c.path, c.help);
    if (c.flags) c.flags(*at, f);
    apps.push_back(at);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Usage(std::string(e.what()) + "\nRun with --help for the commands.");
  }
  // Exactly one command was given (require_subcommand(1) at each level): run it.
  auto run = [&](bool before_flag_checks) -> std::optional<int> {
    for (size_t i = 0; i < commands.size(); ++i) {
      const Command& c = commands[i];
      if (c.before_flag_checks != before_flag_checks) continue;
      if (!c.path.empty() && !apps[i]->parsed()) continue;
      if (std::optional<int> rc = c.run(f)) return rc;
    }
    return std::nullopt;
  };
  if (std::optional<int> rc = run(/*before_flag_checks=*/true)) return *rc;
  if (int rc = CheckGlobalFlags(f); rc != 0) return rc;
  bool public_api = false;
  for (size_t i = 0; i < commands.size(); ++i) {
    public_api = public_api || (commands[i].public_api && apps[i]->parsed());
  }
  if (!public_api && f.g.token.empty()) {
    f.g.token = exa::tools::LocalAdminToken(f.g.addr, f.g.data_dir);
  }
  if (std::optional<int> rc = run(/*before_flag_checks=*/false)) return *rc;
  return Usage("no command given");
}
