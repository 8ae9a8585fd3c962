// exaserve.v1.Scheduler's handlers for exaserve-cli (scheduler_service.h): specs (apply, get,
// describe, delete), node operations, rollouts, version routes and label rules.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/chars.h"
#include "common/logging.h"
#include "common/strings.h"
#include "net/grpc_status.h"
#include "nlohmann/json.hpp"
#include "scheduler/describe.h"
#include "scheduler/rpc_reply.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/spec_versions.h"

namespace exa::scheduler {
namespace {

namespace pb = exaserve::v1;
using nlohmann::json;

constexpr size_t kMaxRoutes = 16;  // the gateway's bound
constexpr size_t kMaxLabelRules = 64;

void ToProto(const cluster::LabelRule& rule, pb::LabelReplicasRequest* out) {
  out->mutable_selector()->insert(rule.selector.begin(), rule.selector.end());
  out->mutable_labels()->insert(rule.set.begin(), rule.set.end());
  for (const std::string& k : rule.remove) out->add_remove(k);
}

// "-old" / "+new" lines between two canonical YAML texts (a line-set diff: canonical YAML keeps
// every field in a fixed order, so changed lines are what changed).
std::string LineDiff(const std::string& before, const std::string& after) {
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  std::vector<std::string> a = lines(before), b = lines(after);
  std::multiset<std::string> in_a(a.begin(), a.end()), in_b(b.begin(), b.end());
  std::string out;
  for (const std::string& l : a) {
    if (!in_b.count(l)) StrAppend(&out, "-", l, "\n");
  }
  for (const std::string& l : b) {
    if (!in_a.count(l)) StrAppend(&out, "+", l, "\n");
  }
  return out;
}

// The stored version routes with `pending` writes (key → value; nullopt removes) in place, or
// the gateways' default when there are none.
void ListRoutes(const StoreRecords& records,
                const std::vector<std::pair<std::string, std::optional<std::string>>>& pending,
                pb::RoutesResponse* response) {
  std::map<std::string, std::string> routes;  // header → JSON
  for (const auto& [key, r] : records) {
    if (key.rfind(kRoutePrefix, 0) == 0) routes[key.substr(kRoutePrefix.size())] = r.value;
  }
  for (const auto& [key, value] : pending) {
    std::string header = key.substr(kRoutePrefix.size());
    if (value) {
      routes[header] = *value;
    } else {
      routes.erase(header);
    }
  }
  if (routes.empty()) {
    pb::VersionRoute* d = response->add_routes();  // the gateways' default
    d->set_header("x-model-version");
    d->set_label("version");
    return;
  }
  for (const auto& [header, value] : routes) {
    json j = json::parse(value, nullptr, false);
    if (!j.is_object()) continue;
    pb::VersionRoute* r = response->add_routes();
    r->set_header(header);
    r->set_label(j.value("label", "version"));
    r->set_default_value(j.value("default", ""));
  }
}

// `request`'s operation applied to `ops`, the node's stored operations: NOT_FOUND for a taint
// it does not have, FAILED_PRECONDITION for a drain that would take a deployment below its
// availability floor, INVALID_ARGUMENT for an unknown op.
grpc::Status ApplyNodeOp(const pb::NodeOpRequest& request, const NodeStatus& node,
                         const std::map<std::string, DeploymentStatus>& status, NodeOps& ops) {
  switch (request.op()) {
    case pb::NodeOpRequest::OP_CORDON:
      ops.cordoned = true;
      break;
    case pb::NodeOpRequest::OP_UNCORDON:
      ops.cordoned = false;
      ops.draining = false;
      break;
    case pb::NodeOpRequest::OP_TAINT:
      if (std::find(ops.taints.begin(), ops.taints.end(), request.taint()) == ops.taints.end()) {
        ops.taints.push_back(request.taint());
      }
      break;
    case pb::NodeOpRequest::OP_UNTAINT: {
      auto it = std::find(ops.taints.begin(), ops.taints.end(), request.taint());
      if (it == ops.taints.end()) {
        // A typo must not look like success (kubectl answers the same way).
        return grpc::Status(
            grpc::NOT_FOUND,
            StrCat("node ", request.node(), " has no taint \"", request.taint(), "\" (its taints: ",
                   ops.taints.empty() ? std::string("none") : absl::StrJoin(ops.taints, ", "),
                   ")"));
      }
      ops.taints.erase(it);
      break;
    }
    case pb::NodeOpRequest::OP_DRAIN: {
      // The availability floor: every deployment keeps ≥ 99 % of its desired
      // replicas ready once this node's are gone, or the drain is refused.
      std::map<std::string, int> on_node;
      for (const ReplicaRecord& r : node.replicas) {
        if (r.phase == ReplicaPhase::kReady) on_node[std::string(SpecOfTrack(r.deployment))]++;
      }
      for (const auto& [name, count] : on_node) {
        auto st = status.find(name);
        if (st == status.end()) continue;
        const int after = st->second.ready - count;
        if (after * 100 < st->second.desired * 99) {
          return grpc::Status(grpc::FAILED_PRECONDITION,
                              StrCat("drain ", request.node(), " refused: ", name, " would have ",
                                     after, " of ", st->second.desired, " replicas ready (", count,
                                     " on this node), below the 99 % floor; add "
                                     "capacity or scale it down first"));
        }
      }
      ops.cordoned = true;
      ops.draining = true;
      break;
    }
    default:
      return grpc::Status(grpc::INVALID_ARGUMENT,
                          "op: cordon, uncordon, drain, taint, untaint or list");
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::ServerUnaryReactor* SchedulerService::Apply(grpc::CallbackServerContext* context,
                                                  const pb::ApplyRequest* request,
                                                  pb::ApplyResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (auto s = Authorize(context, "Scheduler.Apply"); !s.ok()) return Finish(context, s);
  const std::string source = request->source().empty() ? "spec" : request->source();
  ResourceVersions in_yaml;  // ParseSpecs refuses a file without a spec
  absl::StatusOr<std::vector<InferenceReplicaSpec>> specs =
      ParseSpecs(request->yaml(), source, &in_yaml);
  if (!specs.ok()) return Finish(context, net::StatusToGrpc(specs.status()));
  absl::StatusOr<ResourceVersions> named = NamedVersions(*request, *specs, std::move(in_yaml));
  if (!named.ok()) return Finish(context, net::StatusToGrpc(named.status()));
  // Every spec must plan (a known model, memory that covers the estimate) before any is written.
  for (const InferenceReplicaSpec& spec : *specs) {
    absl::StatusOr<uint64_t> bytes = ReplicaBytes(spec);
    if (!bytes.ok()) return Finish(context, net::StatusToGrpc(bytes.status()));
  }
  // What is unchanged is decided after a read index: a stale scheduler's own copy must not
  // acknowledge an apply the store never saw (docs/testing.md#control-plane).
  return ReadThenWrite(context, [this, request, response, specs = std::move(*specs),
                                 named = std::move(*named)](grpc::ServerUnaryReactor* reactor)
                                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                      return ApplyLocked(*request, specs, named, response, reactor);
                                    });
}

std::optional<grpc::Status> SchedulerService::ApplyLocked(
    const pb::ApplyRequest& request, const std::vector<InferenceReplicaSpec>& specs,
    const std::map<std::string, uint64_t>& named, pb::ApplyResponse* response,
    grpc::ServerUnaryReactor* reactor) {
  std::vector<std::pair<std::string, std::optional<std::string>>> writes;
  std::map<std::string, uint64_t> expected;  // store key → the version the caller read
  for (const InferenceReplicaSpec& spec : specs) {
    const std::string key = StrCat(kSpecPrefix, spec.name);
    const std::string yaml = SpecToYaml(spec);
    pb::SpecChange* change = response->add_changes();
    change->set_name(spec.name);
    const StoreRecord* old = store_->Get(key);
    absl::Status rollout =
        CheckApplyDuringRollout(spec, RolloutStateIn(store_->Records(), spec.name));
    if (!rollout.ok()) return net::StatusToGrpc(rollout);
    auto n = named.find(spec.name);
    const bool same = old && old->value == yaml;
    if (same && (n == named.end() || n->second == ResourceVersion(old))) {
      change->set_action("unchanged");
      continue;
    }
    if (n != named.end()) {  // checked here for a dry run, in the Raft log for a write
      if (request.dry_run() && n->second != ResourceVersion(old)) {
        return ConflictStatus({key, n->second, ResourceVersion(old)});
      }
      expected[key] = n->second;
    }
    change->set_action(same ? "unchanged" : old ? "updated" : "created");
    change->set_diff(LineDiff(old ? old->value : std::string(), yaml));
    writes.emplace_back(key, yaml);
  }
  if (request.dry_run() || writes.empty()) return grpc::Status::OK;
  for (const auto& [key, value] : writes) {
    AddEventLocked(key.substr(kSpecPrefix.size()), StrCat("spec written on ", options_.node_id));
  }
  return StartWritesLocked(writes, reactor, expected);
}

grpc::ServerUnaryReactor* SchedulerService::GetSpecs(grpc::CallbackServerContext* context,
                                                     const pb::GetSpecsRequest* request,
                                                     pb::GetSpecsResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  return ReadThen(context, [this, request, response]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const StoreRecord& r : store_->Live()) {
      if (r.key.rfind(kSpecPrefix, 0) != 0) continue;
      std::string name = r.key.substr(kSpecPrefix.size());
      if (!request->name().empty() && name != request->name()) continue;
      pb::StoredSpec* s = response->add_specs();
      s->set_name(name);
      s->set_yaml(r.value);
      s->set_resource_version(ResourceVersion(&r));
      s->set_version(StrCat(s->resource_version()));
    }
    if (!request->name().empty() && response->specs().empty()) {
      return grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request->name()));
    }
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* SchedulerService::Describe(grpc::CallbackServerContext* context,
                                                     const pb::DescribeRequest* request,
                                                     pb::DescribeResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  return ReadThen(context, [this, request, response]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return DescribeLocked(*request, response);
  });
}

grpc::Status SchedulerService::DescribeLocked(const pb::DescribeRequest& request,
                                              pb::DescribeResponse* response) {
  const StoreRecord* r = store_->Get(StrCat(kSpecPrefix, request.name()));
  if (!r) return grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request.name()));
  json out;
  out["name"] = request.name();
  out["resource_version"] = ResourceVersion(r);
  out["version"] = StrCat(ResourceVersion(r));
  out["reconciler"] = loop_.reconciler();
  out["described_by"] = options_.node_id;
  int stopping = 0;  // draining after a stop, listed apart: they no longer count
  json replicas = json::parse(DescribeReplicasJson(loop_.nodes(), request.name(), &stopping));
  json status = json::object();
  auto st = loop_.status().find(request.name());
  if (st != loop_.status().end()) status = json::parse(DescribeStatusJson(st->second, stopping));
  out["status"] = status;
  out["replicas"] = replicas;
  out["rollout"] =
      json::parse(RolloutStateToJson(RolloutStateIn(store_->Records(), request.name())));
  json events = json::array();
  if (const auto* ev = loop_.events(request.name())) {
    for (const ControlLoop::Event& e : *ev) {
      events.push_back({{"time", absl::FormatTime(absl::RFC3339_sec, e.time, absl::UTCTimeZone())},
                        {"message", e.message}});
    }
  }
  out["events"] = events;
  if (const AutoscaleReport* a = loop_.autoscale(request.name())) {
    out["autoscaling"] = json::parse(DescribeAutoscalingJson(
        *a, AutoscaleStateIn(store_->Records(), request.name()), loop_.Spec(*r).desired));
  }
  response->set_json(out.dump());
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* SchedulerService::DeleteSpec(grpc::CallbackServerContext* context,
                                                       const pb::DeleteSpecRequest* request,
                                                       pb::DeleteSpecResponse*) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (auto s = Authorize(context, "Scheduler.DeleteSpec"); !s.ok()) return Finish(context, s);
  // Whether the spec exists is decided after a read index, as for Apply.
  return ReadThenWrite(
      context, [this, request](grpc::ServerUnaryReactor* reactor)
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DeleteLocked(*request, reactor); });
}

std::optional<grpc::Status> SchedulerService::DeleteLocked(const pb::DeleteSpecRequest& request,
                                                           grpc::ServerUnaryReactor* reactor) {
  const std::string key = StrCat(kSpecPrefix, request.name());
  if (!store_->Get(key)) {
    return grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request.name()));
  }
  AddEventLocked(request.name(), StrCat("spec deleted on ", options_.node_id));
  std::vector<std::pair<std::string, std::optional<std::string>>> writes = {{key, std::nullopt}};
  for (std::string_view prefix : {kRolloutPrefix, kRolloutCommandPrefix, kAutoscalePrefix}) {
    std::string k = StrCat(prefix, request.name());
    if (store_->Get(k)) writes.emplace_back(k, std::nullopt);
  }
  // With a named version the spec and its rollout state go in one transaction: a stale version
  // leaves both as they are.
  std::map<std::string, uint64_t> expected;
  if (request.has_resource_version()) expected[key] = request.resource_version();
  return StartWritesLocked(writes, reactor, expected);
}

grpc::ServerUnaryReactor* SchedulerService::NodeOp(grpc::CallbackServerContext* context,
                                                   const pb::NodeOpRequest* request,
                                                   pb::NodeOpResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  auto list = [&](const std::map<std::string, NodeOps>& ops) {
    json out = json::array();
    for (const auto& [id, o] : ops) {
      out.push_back(
          {{"node", id}, {"cordoned", o.cordoned}, {"draining", o.draining}, {"taints", o.taints}});
    }
    response->set_json(out.dump());
  };
  if (request->op() == pb::NodeOpRequest::OP_LIST) {
    absl::MutexLock lock(&mu_);
    list(NodeOpsIn(store_->Records()));
    return Finish(context, grpc::Status::OK);
  }
  if (auto s = Authorize(context, "Scheduler.NodeOp"); !s.ok()) return Finish(context, s);
  if (request->node().empty()) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, "node: a node id is required"));
  }
  const bool taint_op = request->op() == pb::NodeOpRequest::OP_TAINT ||
                        request->op() == pb::NodeOpRequest::OP_UNTAINT;
  if (taint_op && (request->taint().empty() || request->taint().size() > 63 ||
                   !OnlyAlnumOr(request->taint(), "._/-"))) {
    return Finish(context,
                  grpc::Status(grpc::INVALID_ARGUMENT,
                               "taint: 1 to 63 of letters, digits, '.', '_', '/', '-', e.g. "
                               "\"maintenance\""));
  }
  absl::ReleasableMutexLock lock(&mu_);
  if (!loop_.nodes().count(request->node())) {
    return Finish(context,
                  grpc::Status(grpc::NOT_FOUND, StrCat("node ", request->node(),
                                                       " is not in this scheduler's view")));
  }
  std::map<std::string, NodeOps> all = NodeOpsIn(store_->Records());
  NodeOps ops = all[request->node()];
  if (grpc::Status st =
          ApplyNodeOp(*request, loop_.nodes().at(request->node()), loop_.status(), ops);
      !st.ok()) {
    return Finish(context, st);
  }
  all[request->node()] = ops;
  list(all);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{StrCat(kNodePrefix, request->node()), NodeOpsToJson(ops)}}, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::Rollout(grpc::CallbackServerContext* context,
                                                    const pb::RolloutRequest* request,
                                                    pb::RolloutResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  const bool status_only = request->command().empty() || request->command() == "status";
  absl::StatusOr<RolloutCommand> command = RolloutCommand::kPause;
  if (!status_only) {
    if (auto s = Authorize(context, "Scheduler.Rollout"); !s.ok()) return Finish(context, s);
    command = ParseRolloutCommand(request->command());
    if (!command.ok()) return Finish(context, net::StatusToGrpc(command.status()));
  }
  absl::ReleasableMutexLock lock(&mu_);
  const StoreRecord* r = store_->Get(StrCat(kSpecPrefix, request->name()));
  if (!r) {
    return Finish(context,
                  grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request->name())));
  }
  const ControlLoop::CachedSpec& c = loop_.Spec(*r);
  if (!c.desired.ok()) return Finish(context, net::StatusToGrpc(c.desired.status()));
  const InferenceReplicaSpec& spec = c.desired->spec;
  RolloutState state = RolloutStateIn(store_->Records(), request->name());
  const absl::Time now = absl::Now();
  if (status_only) {
    json out = json::parse(RolloutStateToJson(state));
    out["name"] = spec.name;
    out["spec_version"] = spec.version;
    std::vector<int> counts = RolloutStageCounts(spec);
    out["stages"] = counts;
    out["observe_s"] = absl::ToDoubleSeconds(spec.rollout.observe);
    out["threshold"] = spec.rollout.regression_threshold;
    json cmp = json::array();
    for (const MetricComparison& m : CompareNow(now, spec, state, loop_.window())) {
      cmp.push_back({{"metric", m.metric},
                     {"old", m.old_value},
                     {"new", m.new_value},
                     {"old_samples", m.old_samples},
                     {"new_samples", m.new_samples},
                     {"judged", m.judged},
                     {"regressed", m.regressed}});
    }
    out["window_so_far"] = cmp;
    json ready = json::object();
    for (const auto& [id, node] : loop_.nodes()) {
      for (const ReplicaRecord& rec : node.replicas) {
        if (rec.phase != ReplicaPhase::kReady) continue;
        if (SpecOfTrack(rec.deployment) != spec.name) continue;
        const std::string version(VersionOfTrack(rec.deployment));
        if (!version.empty()) ready[version] = ready.value(version, 0) + 1;
      }
    }
    out["ready"] = ready;
    response->set_json(out.dump());
    return Finish(context, grpc::Status::OK);
  }
  // Checked here for a clear answer; the reconciler applies it at its next step.
  absl::StatusOr<RolloutState> next = ApplyCommand(now, spec, state, *command, loop_.window());
  if (!next.ok()) return Finish(context, net::StatusToGrpc(next.status()));
  const std::string cmd =
      RolloutCommandToJson({static_cast<uint64_t>(absl::ToUnixMicros(now)), *command});
  response->set_json(RolloutStateToJson(*next));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{StrCat(kRolloutCommandPrefix, spec.name), cmd}}, reactor);
  return reactor;
}

// A gateway's list call also says which models it holds requests for with no replica to serve
// them; for a model that may be at zero replicas the demand is stored (at most every
// kActivationRefresh per model) so that the leader's autoscaler starts one.
void SchedulerService::NoteWaitingLocked(const pb::RoutesRequest& request,
                                         pb::RoutesResponse* response) {
  const std::set<std::string> activatable = loop_.ActivatableModels();
  for (const std::string& m : activatable) response->add_activatable_models(m);
  const absl::Time now = absl::Now();
  const int n = std::min(request.waiting_models_size(), 64);
  for (int i = 0; i < n; ++i) {
    const std::string model(ModelOfRequest(request.waiting_models(i)));
    if (activatable.count(model) == 0) continue;
    std::optional<absl::Time> last = ActivationIn(store_->Records(), model);
    if (last && now - *last < kActivationRefresh) continue;
    store_->Put(now, StrCat(kActivationPrefix, model), StrCat(absl::ToUnixMillis(now)));
  }
  // Records of models nothing can activate any more go, so the store does not keep one per
  // model ever activated.
  for (const std::string& key : StaleActivations(store_->Records(), activatable, now, 16)) {
    store_->Delete(now, key);
  }
}

grpc::ServerUnaryReactor* SchedulerService::Routes(grpc::CallbackServerContext* context,
                                                   const pb::RoutesRequest* request,
                                                   pb::RoutesResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (request->op() == pb::RoutesRequest::OP_LIST) {
    absl::MutexLock lock(&mu_);
    ListRoutes(store_->Records(), {}, response);
    NoteWaitingLocked(*request, response);
    return Finish(context, grpc::Status::OK);
  }
  if (auto s = Authorize(context, "Scheduler.Routes"); !s.ok()) return Finish(context, s);
  if (!env_.normalize_route) {
    return Finish(context, grpc::Status(grpc::FAILED_PRECONDITION, "routes are not enabled here"));
  }
  pb::VersionRoute route = request->route();
  if (request->op() == pb::RoutesRequest::OP_SET) {
    if (absl::Status s = env_.normalize_route(&route); !s.ok())
      return Finish(context, net::StatusToGrpc(s));
  } else if (request->op() == pb::RoutesRequest::OP_REMOVE) {
    pb::VersionRoute probe = route;
    probe.set_label("version");
    if (absl::Status s = env_.normalize_route(&probe); !s.ok())
      return Finish(context, net::StatusToGrpc(s));
    route.set_header(probe.header());
  } else {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, "op: list, set or remove"));
  }
  absl::ReleasableMutexLock lock(&mu_);
  const std::string key = StrCat(kRoutePrefix, route.header());
  std::vector<std::pair<std::string, std::optional<std::string>>> writes;
  if (request->op() == pb::RoutesRequest::OP_SET) {
    if (!store_->Get(key) && CountPrefix(store_->Records(), kRoutePrefix) >= kMaxRoutes) {
      return Finish(context, grpc::Status(grpc::RESOURCE_EXHAUSTED,
                                          StrCat("at most ", kMaxRoutes, " routes; remove one")));
    }
    writes.emplace_back(key,
                        json{{"label", route.label()}, {"default", route.default_value()}}.dump());
  } else {
    if (!store_->Get(key)) {
      return Finish(context,
                    grpc::Status(grpc::NOT_FOUND, StrCat("no route for header ", route.header())));
    }
    writes.emplace_back(key, std::nullopt);
  }
  ListRoutes(store_->Records(), writes, response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked(writes, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::LabelRules(grpc::CallbackServerContext* context,
                                                       const pb::LabelReplicasRequest* request,
                                                       pb::LabelRulesResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  const auto list = [&](const std::vector<cluster::LabelRule>& rules) {
    for (const cluster::LabelRule& r : rules) ToProto(r, response->add_rules());
  };
  if (request->labels().empty() && request->remove().empty()) {
    absl::MutexLock lock(&mu_);
    list(LabelRulesIn(store_->Records()));
    return Finish(context, grpc::Status::OK);
  }
  if (auto s = Authorize(context, "Scheduler.LabelRules"); !s.ok()) return Finish(context, s);
  cluster::LabelRule update;
  update.selector.insert(request->selector().begin(), request->selector().end());
  update.set.insert(request->labels().begin(), request->labels().end());
  update.remove.assign(request->remove().begin(), request->remove().end());
  if (absl::Status s = cluster::ValidateChange(update.set, update.remove); !s.ok()) {
    return Finish(context, net::StatusToGrpc(s));
  }
  if (absl::Status s = cluster::ValidateLabels(update.selector); !s.ok()) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, StrCat("selector: ", s.message())));
  }
  absl::ReleasableMutexLock lock(&mu_);
  const std::string key = StrCat(kLabelRulePrefix, json(update.selector).dump());
  cluster::LabelRule merged = update;
  if (const StoreRecord* stored = store_->Get(key)) {
    if (std::optional<cluster::LabelRule> old = LabelRuleFromJson(stored->value)) {
      merged = cluster::MergeRule(std::move(*old), update);
    }
  } else {
    if (CountPrefix(store_->Records(), kLabelRulePrefix) >= kMaxLabelRules) {
      return Finish(context, grpc::Status(grpc::RESOURCE_EXHAUSTED,
                                          StrCat("at most ", kMaxLabelRules,
                                                 " label rules (one per selector)")));
    }
  }
  if (merged.set.size() > cluster::kMaxLabelsPerReplica) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT,
                                        StrCat("labels: at most ", cluster::kMaxLabelsPerReplica,
                                               " per rule")));
  }
  list(LabelRulesIn(store_->Records(), std::make_pair(key, merged)));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{key, LabelRuleToJson(merged)}}, reactor);
  return reactor;
}

}  // namespace exa::scheduler
