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

namespace exa::bench {
namespace {

using nlohmann::json;

struct TraceRequest {
  double arrival_s = 0;
  int32_t input_length = 0;
  int32_t output_length = 0;
  std::vector<int64_t> hash_ids;
};

absl::StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("--trace \"", path, "\": cannot open"));
  std::vector<TraceRequest> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    try {
      const json j = json::parse(line);
      TraceRequest r;
      r.arrival_s = j.at("timestamp").get<double>() / 1000.0;
      r.input_length = j.at("input_length").get<int32_t>();
      r.output_length = j.at("output_length").get<int32_t>();
      r.hash_ids = j.at("hash_ids").get<std::vector<int64_t>>();
      if (r.input_length < 1 || r.output_length < 0) {
        return absl::InvalidArgumentError(StrCat(path, ":", line_no, ": input_length ",
                                                 r.input_length, " or output_length ",
                                                 r.output_length, " out of range"));
      }
      out.push_back(std::move(r));
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(StrCat(path, ":", line_no, ": ", e.what()));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError(StrCat(path, ": no requests"));
  return out;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Prompt tokens: each 512-token block a function of its hash id (equal ids at equal positions
// give equal tokens, hence equal prefixes), tokens past the listed blocks unique to the request.
std::vector<int32_t> PromptTokens(const TraceRequest& r, size_t index, int32_t vocab) {
  constexpr int32_t kTraceBlock = 512;
  std::vector<int32_t> tokens(static_cast<size_t>(r.input_length));
  for (int32_t i = 0; i < r.input_length; ++i) {
    const size_t block = static_cast<size_t>(i / kTraceBlock);
    const uint64_t seed = block < r.hash_ids.size() ? static_cast<uint64_t>(r.hash_ids[block])
                                                    : (uint64_t{1} << 62) + index * 1000003 + block;
    const uint64_t h = SplitMix(seed * 4096 + static_cast<uint64_t>(i % kTraceBlock));
    // Clear of the sim's small special ids and its output-length directive marker.
    tokens[static_cast<size_t>(i)] =
        16 + static_cast<int32_t>(h % static_cast<uint64_t>(vocab - 16));
  }
  return tokens;
}

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
  n.engine.prefix_cache.report_every_blocks = o.report_every_blocks;
  n.engine.prefix_cache_namespace = "llama-2-13b@v1/sim";
  for (int i = 0; i < o.replicas; ++i) {
    EXA_ASSIGN_OR_RETURN(auto r, engine::SimReplica::Create(n.engine, start));
    n.replicas.push_back(std::move(r));
    n.journals.push_back(std::make_unique<engine::PrefixJournal>(static_cast<uint64_t>(i + 1),
                                                                 o.report_every_blocks));
    n.ids.push_back(StrCat("node-0/llama-2-13b@v1#", i));
  }
  return absl::OkStatus();
}

// Request `index` of the trace arrives at `at`, round-robin over the replicas (the worst case for
// the report: the least sharing, the most stored blocks).
void Submit(Node& n, const TraceRequest& r, size_t index, absl::Time at) {
  engine::SimReplica& replica = *n.replicas[index % n.replicas.size()];
  replica.RunUntil(at);
  engine::GenerateRequest g;
  g.prompt_tokens = PromptTokens(r, index, n.engine.sim.vocab_size);
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
              {"report_every_blocks", o.report_every_blocks},
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
  EXA_ASSIGN_OR_RETURN(std::vector<TraceRequest> trace, ReadTrace(o.trace));
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
