// `exaserve-cli plan`: the memory planner's table (docs/architecture.md#memory-arithmetic).
#pragma once

#include "CLI/CLI.hpp"

namespace exa::tools {

struct PlanOptions {
  std::string model_dir;
  std::string preset;
  std::string dtype;     // default: the checkpoint's torch_dtype, else fp16
  std::string kv_dtype;  // default: dtype
  int context = 4096;
  int concurrency = 4;
  std::string gpu_memory = "80Gi";
  int gpus_per_node = 8;
  int gpus_per_replica = 1;
  double headroom = 0.15;
  double fragmentation = 0.08;
  bool json = false;
};

// Registers `plan` on `app`; returns the subcommand so main can test parsed().
CLI::App* AddPlanCommand(CLI::App& app, PlanOptions& options);
// Prints the table (or JSON); exit code 0, or 2 with a message on stderr for bad input.
int RunPlan(const PlanOptions& options, bool json);

}  // namespace exa::tools
