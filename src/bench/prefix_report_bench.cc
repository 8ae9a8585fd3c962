#include "bench/prefix_report_bench.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "engine/prefix_journal.h"
#include "engine/sim_replica.h"
#include "exaserve/v1/node.pb.h"
#include "node/node_service.h"
#include "traces/trace.h"

namespace exa::bench {
namespace {

using nlohmann::json;

// One node's replicas and journals, and what its load stream has carried so far.
struct Node {
  engine::EngineOptions engine;
  std::vector<std::unique_ptr<engine::SimReplica>> replicas;
  std::vector<std::unique_ptr<engine::PrefixJournal>> journals;
  std::vector<std::string> ids;
  node::CacheCursors cursors;
  int64_t report_bytes = 0, delta_bytes = 0, reports = 0, events = 0;
  int64_t submitted = 0, refused = 0;
};

absl::Status MakeNode(const PrefixReportOptions& o, absl::Time start, Node& n) {
  n.engine.backend = "sim";
  n.engine.sim.max_context = o.max_context;
  n.engine.kv_cache_bytes = o.kv_tokens * n.engine.sim.kv_bytes_per_token;
  n.engine.max_queue = 1 << 16;
  n.engine.prefix_cache.report = o.report;
  n.engine.prefix_cache_namespace = CacheNamespace("llama-2-13b", "v1", "sim");
  for (int i = 0; i < o.replicas; ++i) {
    EXA_ASSIGN_OR_RETURN(auto r, engine::SimReplica::Create(n.engine, start));
    n.replicas.push_back(std::move(r));
    n.journals.push_back(
        std::make_unique<engine::PrefixJournal>(static_cast<uint64_t>(i + 1), o.report));
    n.ids.push_back(StrCat("node-0/llama-2-13b@v1#", i));
  }
  return absl::OkStatus();
}

// Request `index` of the trace arrives at `at`, round-robin over the replicas (the worst case for
// the report: the least sharing, the most stored blocks).
void Submit(Node& n, const traces::TraceRequest& r, size_t index, absl::Time at) {
  engine::SimReplica& replica = *n.replicas[index % n.replicas.size()];
  replica.RunUntil(at);
  engine::GenerateRequest g;
  g.prompt_tokens = traces::TracePromptTokens(r, index, n.engine.sim.vocab_size);
  g.max_tokens = std::max(1, r.output_length);
  g.ignore_eos = true;
  g.callback = [](const engine::StreamEvent&) {};
  if (replica.Submit(std::move(g), at).ok()) {
    ++n.submitted;
  } else {
    ++n.refused;  // longer than the context or the KV cache
  }
}

// The node's load report at `t`, built as Node.WatchLoad builds it, and its size counted.
void Report(Node& n, absl::Time t) {
  exaserve::v1::LoadReport report;
  report.set_node_id("node-0");
  report.set_sequence(static_cast<uint64_t>(++n.reports));
  for (size_t i = 0; i < n.replicas.size(); ++i) {
    n.replicas[i]->RunUntil(t);
    n.replicas[i]->PublishCacheEvents(*n.journals[i]);
    node::FillReplicaLoad(n.ids[i], "llama-2-13b", "v1", true, n.replicas[i]->Load(),
                          report.add_replicas());
  }
  const node::JournalOf journal_of = [&n](const std::string& id) -> const engine::PrefixJournal* {
    auto it = std::find(n.ids.begin(), n.ids.end(), id);
    return it == n.ids.end() ? nullptr : n.journals[static_cast<size_t>(it - n.ids.begin())].get();
  };
  node::AddCacheDeltas(report, journal_of, n.cursors, t);
  for (const auto& p : report.replicas()) {
    if (!p.has_cache_delta()) continue;
    n.delta_bytes += static_cast<int64_t>(p.cache_delta().ByteSizeLong()) + 3;  // tag + length
    n.events += static_cast<int64_t>(p.cache_delta().hashes().size() / 8);
  }
  n.report_bytes += static_cast<int64_t>(report.ByteSizeLong()) + 5;  // gRPC message prefix
}

json Summary(const PrefixReportOptions& o, const Node& n) {
  const double seconds = static_cast<double>(n.reports) / o.report_hz;
  int64_t hit = 0, miss = 0;
  for (const auto& r : n.replicas) {
    hit += r->Load().prefix_hit_tokens;
    miss += r->Load().prefix_miss_tokens;
  }
  const double load_only = static_cast<double>(n.report_bytes - n.delta_bytes) / seconds;
  const double deltas = static_cast<double>(n.delta_bytes) / seconds;
  return json{{"trace", o.trace},
              {"replicas", o.replicas},
              {"speedup", o.speedup},
              {"replayed_seconds", seconds},
              {"report_hz", o.report_hz},
              {"report_every_blocks", o.report.every_blocks},
              {"report_max_every_blocks", o.report.Normalized().max_every_blocks},
              {"requests", n.submitted},
              {"refused", n.refused},
              {"prefix_hit_ratio", hit + miss > 0 ? double(hit) / double(hit + miss) : 0.0},
              {"cache_events", n.events},
              {"load_stream_bytes_per_s_without_cache", load_only},
              {"cache_delta_bytes_per_s", deltas},
              {"gossip_bytes_per_s", o.gossip_bytes_per_s},
              {"cache_share_of_load_stream", deltas / (load_only + deltas)},
              {"cache_share_of_gossip_and_load_stream",
               deltas / (load_only + deltas + o.gossip_bytes_per_s)}};
}

}  // namespace

absl::StatusOr<json> RunPrefixReportBench(const PrefixReportOptions& o) {
  if (o.replicas < 1 || o.replicas > 64 || !(o.speedup > 0) || !(o.report_hz > 0) ||
      o.duration_s < 0) {
    return absl::InvalidArgumentError(StrCat("--replicas ", o.replicas, " (1-64), --speedup ",
                                             o.speedup, " (> 0), --report-hz ", o.report_hz,
                                             " (> 0), --duration ", o.duration_s, " (>= 0)"));
  }
  EXA_ASSIGN_OR_RETURN(traces::Trace loaded, traces::ReadTrace(o.trace));
  const std::vector<traces::TraceRequest>& trace = loaded.requests;
  const absl::Time start = absl::UnixEpoch();
  Node n;
  EXA_RETURN_IF_ERROR(MakeNode(o, start, n));
  const double end_s = o.duration_s > 0 ? o.duration_s : trace.back().arrival_s / o.speedup + 1;
  const absl::Duration period = absl::Seconds(1.0 / o.report_hz);
  const auto arrival = [&](size_t i) {
    return start + absl::Seconds(trace[i].arrival_s / o.speedup);
  };
  size_t next = 0;
  for (absl::Time t = start + period; t <= start + absl::Seconds(end_s); t += period) {
    for (; next < trace.size() && arrival(next) <= t; ++next) {
      Submit(n, trace[next], next, arrival(next));
    }
    Report(n, t);
    if (next >= trace.size() && o.duration_s == 0) {
      bool busy = false;
      for (const auto& r : n.replicas) busy |= r->NextStepTime() != absl::InfiniteFuture();
      if (!busy) break;
    }
  }
  return Summary(o, n);
}

}  // namespace exa::bench
