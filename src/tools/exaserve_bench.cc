// exaserve-bench: benchmarks that print JSON, each against a baseline measured in the same run
// (DESIGN.md §6).
//
//   exaserve-bench engine --model DIR [--backend cpu|cuda] [--device N] [--threads N] [--accuracy]
//   exaserve-bench weights [--dir /tmp] [--size 2Gi] [--nodes 8] [--parallel 8]
//
// Exit codes: 0 success, 1 the benchmark failed, 2 usage.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "common/logging.h"
#include "common/units.h"
#include "engine/bench/engine_bench.h"
#include "tools/weights_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"exaserve-bench: ExaServe benchmarks (JSON on stdout)"};
  app.require_subcommand(1);
  exa::engine::EngineBenchOptions engine;
  auto* engine_cmd = app.add_subcommand(
      "engine", "prefill and decode throughput vs memory bandwidth; --accuracy for held-out sums");
  engine_cmd->add_option("--model", engine.model_dir, "model directory (HF layout)")->required();
  engine_cmd->add_option("--backend", engine.backend, "cpu (default), cuda or sim")
      ->check(CLI::IsMember({"cpu", "cuda", "sim"}));
  engine_cmd->add_option("--device", engine.device, "backend cuda: the GPU index (default 0)");
  engine_cmd->add_option("--kv-cache-bytes", engine.kv_cache_bytes,
                         "the replica's KV cache budget (default 512 MiB)");
  engine_cmd->add_option("--threads", engine.threads, "CPU threads; 0: one per hardware thread");
  engine_cmd->add_flag("--accuracy", engine.accuracy,
                       "exact-match rate on the model's heldout-2digit.txt");
  engine_cmd->add_option("--prefill-tokens", engine.prefill_tokens, "prompt length for prefill");
  engine_cmd->add_option("--decode-tokens", engine.decode_tokens, "tokens per decode round");
  engine_cmd->add_option("--batch-sizes", engine.batch_sizes,
                         "decode batch sizes (default 1 8 32)");
  engine_cmd->add_option("--repeats", engine.repeats, "rounds per figure; the best is reported");
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "exaserve-bench: %s\nRun with --help for the benchmarks.\n", e.what());
    return 2;
  }
  exa::InitLogging(exa::LogFormat::kText, exa::LogLevel::kWarn);
  if (engine_cmd->parsed()) {
    auto result = exa::engine::RunEngineBench(engine);
    if (!result.ok()) {
      std::fprintf(stderr, "exaserve-bench engine: %s\n",
                   std::string(result.status().message()).c_str());
      return result.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::cout << result->dump(2) << "\n";
    return 0;
  }
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
    auto result = exa::tools::RunWeightsBench(weights);
    if (!result.ok()) {
      std::fprintf(stderr, "exaserve-bench weights: %s\n",
                   std::string(result.status().message()).c_str());
      return result.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::cout << result->dump(2) << "\n";
    return 0;
  }
  return 2;
}
