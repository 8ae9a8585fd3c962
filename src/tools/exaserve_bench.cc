// exaserve-bench: benchmarks that print JSON, each against a baseline measured in the same run
// (docs/testing.md).
//
//   exaserve-bench engine --model DIR [--backend cpu|cuda] [--device N] [--threads N] [--accuracy]
//                         [--isa avx2] [--prefill-tokens 128 512] [--batch-sizes 1 8 32]
//                         [--prefix-share F [--prefix-requests N]]
//   exaserve-bench weights [--dir /tmp] [--size 2Gi] [--nodes 8] [--parallel 8]
//   exaserve-bench route --mode sim [--replicas 48] [--gateways 4] [--rho 0.5 0.7 0.85 0.95]
//                        [--policies ...] [--requests 20000] [--seed 1]
//   exaserve-bench route --mode live [--nodes 4] [--node-replicas 3] [--rho 0.85]
//                        [--duration 60] [--kill-one | --kill-nodes N] [--gateway HOST:PORT]
//   exaserve-bench route --mode overhead [--rate 500] [--duration 20]
//   exaserve-bench prefix-report --trace FILE [--replicas 12] [--speedup 1] [--duration 600]
//   exaserve-bench soak [--minutes 10] [--nodes 6] [--concurrency 6] [--fault-every 30]
//
// Exit codes: 0 success, 1 the benchmark failed, 2 usage.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "bench/prefix_report_bench.h"
#include "bench/route_bench.h"
#include "bench/route_live.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/units.h"
#include "engine/bench/engine_bench.h"
#include "tools/soak_bench.h"
#include "tools/weights_bench.h"

namespace {

// exaserve-bench engine: its flags.
CLI::App* AddEngineCommand(CLI::App& app, exa::engine::EngineBenchOptions* engine) {
  CLI::App* engine_cmd = app.add_subcommand(
      "engine", "prefill and decode throughput vs memory bandwidth; --accuracy for held-out sums");
  engine_cmd->add_option("--model", engine->model_dir, "model directory (HF layout)")->required();
  engine_cmd->add_option("--backend", engine->backend, "cpu (default), cuda or sim")
      ->check(CLI::IsMember({"cpu", "cuda", "sim"}));
  engine_cmd->add_option("--device", engine->device, "backend cuda: the GPU index (default 0)");
  engine_cmd->add_option("--kv-cache-bytes", engine->kv_cache_bytes,
                         "the replica's KV cache budget (default 512 MiB)");
  engine_cmd->add_option("--threads", engine->threads, "CPU threads; 0: one per hardware thread")
      ->check(CLI::Range(0, 1024));
  engine_cmd->add_flag("--accuracy", engine->accuracy,
                       "exact-match rate on the model's heldout-2digit.txt");
  engine_cmd
      ->add_option("--prefill-tokens", engine->prefill_tokens,
                   "prompt lengths for prefill (default 128 512; --prefix-share: the first)")
      ->check(CLI::Range(1, 1 << 20));
  engine_cmd
      ->add_option("--cpu-spin-us", engine->cpu_spin_us,
                   "backend cpu: idle pool threads spin this long before blocking (default 50)")
      ->check(CLI::Range(0, 1000000));
  engine_cmd->add_flag("--cpu-bf16-activations", engine->cpu_bf16_activations,
                       "backend cpu, bf16 weights: round activations to bf16 before each matrix "
                       "product (AVX512-BF16: twice the fp32 rate); default: exact fp32");
  engine_cmd->add_option("--isa", engine->isa,
                         "backend cpu: force a kernel path (scalar, avx2, avx512, avx512bf16)");
  engine_cmd->add_option("--decode-tokens", engine->decode_tokens, "tokens per decode round")
      ->check(CLI::Range(1, 1 << 20));
  engine_cmd
      ->add_option("--temperature", engine->temperature,
                   "decode samples at this temperature, seeded (default 0: greedy)")
      ->check(CLI::Range(0.0, 2.0));
  engine_cmd
      ->add_option("--batch-sizes", engine->batch_sizes, "decode batch sizes (default 1 8 32)")
      ->check(CLI::Range(1, 4096));
  engine_cmd
      ->add_option("--prefix-share", engine->prefix_share,
                   "fraction F of each prompt shared (a common system prompt): TTFT and prefill "
                   "tokens with the prefix cache on and off, same run")
      ->check(CLI::Range(0.0, 1.0));
  engine_cmd
      ->add_option("--prefix-requests", engine->prefix_requests,
                   "--prefix-share: prompts sent, one at a time (default 32)")
      ->check(CLI::Range(2, 100000));
  engine_cmd->add_option("--json-schema", engine->json_schema,
                         "decode held to this JSON Schema and free, interleaved (needs the "
                         "model's tokenizer.json): the structured-output overhead");
  engine_cmd->add_option("--repeats", engine->repeats, "rounds per figure; the best is reported")
      ->check(CLI::Range(1, 1000));
  return engine_cmd;
}

// exaserve-bench prefix-report: its flags.
CLI::App* AddPrefixReportCommand(CLI::App& app, exa::bench::PrefixReportOptions* prefix) {
  CLI::App* prefix_cmd = app.add_subcommand(
      "prefix-report", "the cached-block report's share of a node's load stream, on a trace");
  prefix_cmd->add_option("--trace", prefix->trace, "Mooncake-format JSONL trace")->required();
  prefix_cmd->add_option("--replicas", prefix->replicas, "replicas on the node (default 12)")
      ->check(CLI::Range(1, 64));
  prefix_cmd->add_option("--speedup", prefix->speedup, "trace time / replay time (default 1)")
      ->check(CLI::PositiveNumber);
  prefix_cmd
      ->add_option("--duration", prefix->duration_s,
                   "replayed seconds (default 600; 0: the whole trace)")
      ->check(CLI::NonNegativeNumber);
  prefix_cmd
      ->add_option("--report-every-blocks", prefix->report.every_blocks,
                   "report every this-many-th block near a chain's root (default 4)")
      ->check(CLI::Range(1, 1024));
  prefix_cmd
      ->add_option("--report-max-every-blocks", prefix->report.max_every_blocks,
                   "the widest reporting stride, deep in a chain (default 1024; "
                   "= --report-every-blocks: a fixed stride)")
      ->check(CLI::Range(1, 65536));
  prefix_cmd
      ->add_option("--gossip-bytes-per-s", prefix->gossip_bytes_per_s,
                   "the node's gossip traffic (default 1300: exaserve-sim gossip, N=256)")
      ->check(CLI::NonNegativeNumber);
  return prefix_cmd;
}

// A benchmark's JSON on stdout; its error on stderr, exit 2 for bad input and 1 otherwise.
int PrintResult(const char* name, const absl::StatusOr<nlohmann::json>& result) {
  if (!result.ok()) {
    std::fprintf(stderr, "exaserve-bench %s: %s\n", name,
                 std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << result->dump(2) << "\n";
  return 0;
}

struct RouteCommand {
  std::string mode = "sim";
  exa::bench::RouteSimOptions sim;
  exa::bench::RouteLiveOptions live;
  bool grid = false;
  std::vector<std::string> grid_traces;
};

// The live and overhead modes' options of `exaserve-bench route`.
void AddRouteLiveOptions(CLI::App& route_cmd, RouteCommand* r) {
  std::error_code ec;
  r->live.exaserved =
      (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "exaserved").string();
  route_cmd.add_option("--exaserved", r->live.exaserved,
                       "live/overhead: the exaserved binary (default: next to this one)");
  route_cmd.add_option("--work-dir", r->live.work_dir,
                       "live/overhead: data dirs and logs (default: a new /tmp directory)");
  route_cmd.add_option("--gateway", r->live.gateway_addr,
                       "live: HOST:PORT of a running gateway to drive instead of starting one");
  route_cmd.add_option("--nodes", r->live.nodes, "live: inference processes (default 4)");
  route_cmd.add_option("--node-replicas", r->live.replicas_per_node,
                       "live/overhead: sim replicas per inference process (default 3)");
  route_cmd.add_option("--duration", r->live.duration_s,
                       "live: seconds of arrivals per policy and load (default 60); overhead: "
                       "seconds measured (default 20)");
  route_cmd.add_option("--call-timeout", r->live.call_timeout_s,
                       "live: a call open this many seconds counts as hung (default 120)");
  route_cmd
      .add_flag_callback(
          "--kill-one", [r] { r->live.kill_nodes = 1; }, "live: --kill-nodes 1")
      ->excludes(route_cmd.add_option(
          "--kill-nodes", r->live.kill_nodes,
          "live: a fault-free kv-token-aware run, then the same workload while this many "
          "inference processes are killed -9 one after another; compares every stream's tokens"));
  route_cmd.add_option("--rate", r->live.overhead_rate, "overhead: requests per second");
  route_cmd
      .add_option("--overhead-policy", r->live.overhead_policy,
                  "overhead: the gateway's policy (default round-robin, as the direct calls)")
      ->check(CLI::IsMember({"kv-token-aware", "token-aware", "least-connections", "least-requests",
                             "round-robin", "random"}));
  route_cmd.add_option("--max-tokens", r->live.overhead_max_tokens,
                       "overhead: tokens generated per request (default 4)");
}

CLI::App* AddRouteCommand(CLI::App& app, RouteCommand* r) {
  auto* route_cmd = app.add_subcommand(
      "route",
      "routing policies compared on a fixed workload: P50/P99 TTFT and end-to-end "
      "latency, goodput, rejections per policy and load");
  route_cmd
      ->add_option("--mode", r->mode,
                   "sim (discrete-event, virtual time), live (real processes on loopback) or "
                   "overhead (gateway hop vs Node.Generate direct)")
      ->check(CLI::IsMember({"sim", "live", "overhead"}));
  route_cmd->add_option("--replicas", r->sim.replicas, "sim: replicas (default 48)");
  route_cmd->add_option("--replicas-per-node", r->sim.replicas_per_node,
                        "sim: replicas sharing one load report (default 8)");
  route_cmd->add_option("--gateways", r->sim.gateways,
                        "sim: gateways, each with its own replica table (default 4)");
  route_cmd->add_option("--report-hz", r->sim.report_hz, "sim: load reports per second");
  route_cmd->add_option("--report-change-hz", r->sim.report_change_hz,
                        "sim: a node also reports when a replica's slots changed, at most this "
                        "often (0: only --report-hz)");
  route_cmd->add_option("--rho", r->sim.rhos,
                        "offered load as fractions of capacity (default 0.5 0.7 0.85 0.95)");
  route_cmd->add_option("--policies", r->sim.policies,
                        "routing policies, the first the reference of the comparisons (default: "
                        "kv-token-aware and the five others); sim also takes oracle");
  route_cmd->add_option("--profile", r->sim.profile,
                        "sim: replica sizing: 13b-a100-64 (default), 13b-a100 or long-context");
  route_cmd
      ->add_option("--slots", r->sim.slots,
                   "sim: batch slots (max running sequences), overriding the profile's")
      ->check(CLI::Range(1, 4096));
  route_cmd->add_option("--trace", r->sim.trace,
                        "sim/live: replay a recorded trace (Mooncake JSON lines; CSV: Azure, "
                        "BurstGPT, ...) instead of the synthetic workload");
  route_cmd
      ->add_option("--prompt-median", r->sim.workload.prompt_median,
                   "synthetic workload: median prompt tokens (default 70)")
      ->check(CLI::Range(5.0, 1e6));
  route_cmd
      ->add_option("--prompt-p99", r->sim.workload.prompt_p99,
                   "synthetic workload: p99 prompt tokens (default 3400)")
      ->check(CLI::Range(5.0, 1e6));
  route_cmd
      ->add_option("--output-median", r->sim.workload.output_median,
                   "synthetic workload: median output tokens (default 200)")
      ->check(CLI::Range(1.0, 1e6));
  route_cmd
      ->add_option("--output-p99", r->sim.workload.output_p99,
                   "synthetic workload: p99 output tokens (default 1200; equal to the "
                   "median: every output that long)")
      ->check(CLI::Range(1.0, 1e6));
  route_cmd
      ->add_option("--kv-tokens", r->sim.kv_tokens,
                   "sim: KV cache per replica in tokens, overriding the profile's")
      ->check(CLI::Range(1024, 1 << 24));
  route_cmd->add_flag("--grid", r->grid,
                      "sim: the never-worse grid over workloads x slots {4, 16, 64} x --rho, the "
                      "first policy against least-connections and round-robin");
  route_cmd->add_option("--grid-traces", r->grid_traces, "sim --grid: traces to add as workloads");
  route_cmd->add_option("--cache-report-hz", r->sim.cache_report_hz,
                        "sim: cached-block deltas per second reaching the gateways (default 2)");
  route_cmd->add_option("--requests", r->sim.requests,
                        "measured requests per policy and load (default 20000)");
  route_cmd->add_option("--warmup-fraction", r->sim.warmup_fraction,
                        "extra requests first, not measured, as a fraction of --requests");
  route_cmd->add_option("--capacity-requests", r->sim.capacity_requests,
                        "completions of the saturation run that sizes capacity");
  route_cmd->add_option("--seed", r->sim.seed, "workload and router seed (fixed: reproducible)");
  AddRouteLiveOptions(*route_cmd, r);
  return route_cmd;
}

int RunRoute(const CLI::App& route_cmd, RouteCommand& r) {
  r.live.seed = r.sim.seed;
  r.live.capacity_requests = r.sim.capacity_requests;
  r.live.workload = r.sim.workload;
  r.live.trace = r.sim.trace;
  if (r.mode == "live") {
    if (route_cmd.count("--rho") == 0) r.sim.rhos = {0.85};
    if (route_cmd.count("--policies") == 0) {
      r.sim.policies = {"kv-token-aware", "least-connections", "round-robin"};
    }
    r.live.rhos = r.sim.rhos;
    r.live.policies = r.sim.policies;
  }
  if (r.mode == "overhead" && route_cmd.count("--duration") == 0) {
    r.live.overhead_duration_s = 20;
  } else {
    r.live.overhead_duration_s = r.live.duration_s;
  }
  if (r.mode == "overhead" && route_cmd.count("--node-replicas") == 0) {
    r.live.replicas_per_node = 3;
  }
  if (r.grid && route_cmd.count("--rho") == 0) r.sim.rhos = {0.7, 0.85, 0.95};
  auto result = r.mode == "live"       ? exa::bench::RunRouteLive(r.live)
                : r.mode == "overhead" ? exa::bench::RunRouteOverhead(r.live)
                : r.grid               ? exa::bench::RunRouteGrid(r.sim, r.grid_traces)
                                       : exa::bench::RunRouteSim(r.sim);
  return PrintResult("route", result);
}

}  // namespace

int main(int argc, char** argv) {
  exa::TuneMalloc();
  CLI::App app{"exaserve-bench: ExaServe benchmarks (JSON on stdout)"};
  app.require_subcommand(1);
  exa::engine::EngineBenchOptions engine;
  CLI::App* engine_cmd = AddEngineCommand(app, &engine);
  exa::tools::WeightsBenchOptions weights;
  std::string weights_size = "2Gi", weights_chunk = "64Mi";
  auto* weights_cmd = app.add_subcommand(
      "weights", "rack cold start (origin bytes ratio), pull vs TCP and sha256, load vs raw read");
  weights_cmd->add_option("--dir", weights.dir, "scratch directory (default /tmp; removed after)");
  weights_cmd->add_option("--size", weights_size, "synthetic model size (default 2Gi)");
  weights_cmd->add_option("--files", weights.files, "shards (default 8)")
      ->check(CLI::Range(1, 1000));
  weights_cmd->add_option("--chunk-bytes", weights_chunk, "chunk size (default 64Mi)");
  weights_cmd->add_option("--nodes", weights.nodes, "nodes pulling at once (default 8)")
      ->check(CLI::Range(1, 64));
  weights_cmd->add_option("--parallel", weights.parallel, "streams per node (default 8)")
      ->check(CLI::Range(1, 256));
  weights_cmd->add_option("--streams", weights.streams, "stream counts for one node (1 4 8 16)");
  weights_cmd->add_flag("!--no-split-cores", weights.split_cores,
                        "skip (d): peer and node as processes pinned to CPUs of their own");
  weights_cmd
      ->add_option("--peer-cpu", weights.peer_cpu, "(d) the peer's CPU (default: the first usable)")
      ->check(CLI::Range(0, 4095));
  weights_cmd
      ->add_option("--node-cpu", weights.node_cpu,
                   "(d) the node's CPU (default: the second usable)")
      ->check(CLI::Range(0, 4095));
  weights_cmd->add_option("--repeats", weights.repeats, "(d) pulls per stream count (default 3)")
      ->check(CLI::Range(1, 20));

  RouteCommand route;
  CLI::App* route_cmd = AddRouteCommand(app, &route);
  exa::tools::SoakOptions soak;
  std::error_code ec;
  soak.bin_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
  auto* soak_cmd = app.add_subcommand(
      "soak",
      "a local cluster under steady traffic while inference nodes are paused and killed: "
      "requests by outcome (hangs must be 0), memory per node, alerts");
  soak_cmd->add_option("--minutes", soak.minutes, "how long (default 10)")
      ->check(CLI::Range(0.1, 1440.0));
  soak_cmd->add_option("--nodes", soak.nodes, "cluster size, 2 of them control (default 6)")
      ->check(CLI::Range(5, 32));
  soak_cmd->add_option("--concurrency", soak.concurrency, "requests in flight (default 6)")
      ->check(CLI::Range(1, 256));
  soak_cmd->add_option("--fault-every", soak.fault_every_s, "seconds between faults (default 30)")
      ->check(CLI::Range(1.0, 3600.0));
  soak_cmd->add_option("--max-kills", soak.max_kills, "inference nodes killed at most (default 2)")
      ->check(CLI::Range(0, 30));
  soak_cmd->add_option("--script", soak.script,
                       "the cluster script (default scripts/local-cluster.sh, from the repo root)");
  soak_cmd->add_option("--base-port", soak.base_port, "the cluster's BASE_PORT (default 27000)")
      ->check(CLI::Range(1024, 60000));
  soak_cmd->add_option("--seed", soak.seed, "traffic and fault seed");
  exa::bench::PrefixReportOptions prefix;
  CLI::App* prefix_cmd = AddPrefixReportCommand(app, &prefix);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "exaserve-bench: %s\nRun with --help for the benchmarks.\n", e.what());
    return 2;
  }
  exa::InitLogging(exa::LogFormat::kText, exa::LogLevel::kWarn);
  if (soak_cmd->parsed()) {
    nlohmann::json result;
    int rc = exa::tools::RunSoak(soak, &result);
    if (rc != 0) return rc;
    std::cout << result.dump(2) << "\n";
    return result.value("passed", false) ? 0 : 1;
  }
  if (prefix_cmd->parsed()) {
    return PrintResult("prefix-report", exa::bench::RunPrefixReportBench(prefix));
  }
  if (engine_cmd->parsed()) return PrintResult("engine", exa::engine::RunEngineBench(engine));
  if (weights_cmd->parsed()) {
    auto size = exa::ParseBytes(weights_size);
    auto chunk = exa::ParseBytes(weights_chunk);
    if (!size.ok() || !chunk.ok()) {
      std::fprintf(stderr,
                   "exaserve-bench weights: --size and --chunk-bytes take sizes like 2Gi\n");
      return 2;
    }
    weights.model_bytes = *size;
    weights.chunk_bytes = *chunk;
    return PrintResult("weights", exa::tools::RunWeightsBench(weights));
  }
  if (route_cmd->parsed()) return RunRoute(*route_cmd, route);
  return 2;
}
