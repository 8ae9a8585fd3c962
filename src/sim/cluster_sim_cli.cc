// Command line of `exaserve-sim cluster`.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "scheduler/placement.h"
#include "sim/cli_flags.h"
#include "sim/cluster_sim.h"

namespace exa::sim {
namespace {

absl::StatusOr<double> Number(const std::string& flag, const std::string& text, double lo,
                              double hi) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') {
    return absl::InvalidArgumentError(StrCat(flag, " \"", text, "\": expected a number"));
  }
  if (!(v >= lo && v <= hi)) {
    return absl::InvalidArgumentError(StrCat(flag, " ", text, ": must be in [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::Status Apply(const std::string& key, const std::string& value, ClusterSimOptions* o) {
  auto set_int = [&](int* out, double lo, double hi) -> absl::Status {
    EXA_ASSIGN_OR_RETURN(double v, Number(key, value, lo, hi));
    *out = static_cast<int>(v);
    return absl::OkStatus();
  };
  auto set_double = [&](double* out, double lo, double hi) -> absl::Status {
    EXA_ASSIGN_OR_RETURN(*out, Number(key, value, lo, hi));
    return absl::OkStatus();
  };
  if (key == "--nodes") return set_int(&o->nodes, 1, 100000);
  if (key == "--racks") return set_int(&o->racks, 1, 10000);
  if (key == "--gpus-per-node") return set_int(&o->gpus_per_node, 1, 64);
  if (key == "--schedulers") return set_int(&o->schedulers, 1, 15);
  if (key == "--fault-nodes") return set_int(&o->fault_nodes, 1, 100000);
  if (key == "--duration") return set_double(&o->duration_s, 1, 7 * 86400);
  if (key == "--day") return set_double(&o->day_s, 60, 7 * 86400);
  if (key == "--peak-load") return set_double(&o->peak_load, 0.01, 2);
  if (key == "--ttft-target") return set_double(&o->ttft_target_s, 0.001, 3600);
  if (key == "--trace") {
    o->trace_file = value;
    return absl::OkStatus();
  }
  if (key == "--seed") {
    EXA_ASSIGN_OR_RETURN(double v, Number(key, value, 0, 1e15));
    o->seed = static_cast<uint64_t>(v);
    return absl::OkStatus();
  }
  if (key == "--gpu-memory") {
    auto v = ParseBytes(value);
    if (!v.ok()) return Annotate(v.status(), "--gpu-memory");
    if (*v == 0 || *v > scheduler::kMaxGpuMemoryBytes) {
      return absl::InvalidArgumentError(StrCat("--gpu-memory ", value,
                                               ": expected more than 0 and at most ",
                                               BytesToString(scheduler::kMaxGpuMemoryBytes)));
    }
    o->gpu_memory_bytes = *v;
    return absl::OkStatus();
  }
  if (key == "-f" || key == "--spec") {
    o->spec_file = value;
    return absl::OkStatus();
  }
  if (key == "--scenario") {
    if (value != "kill-8-nodes" && value != "blip-20s" && value != "kill-scheduler-leader" &&
        value != "rack-partition" && value != "canary-bad" && value != "canary-good" &&
        value != "lifetime" && value != "leak" && value != "diurnal" && value != "none") {
      return absl::InvalidArgumentError(
          StrCat("--scenario \"", value,
                 "\": expected kill-8-nodes, blip-20s, kill-scheduler-leader, rack-partition, "
                 "canary-bad, canary-good, lifetime, leak, diurnal or none"));
    }
    o->scenario = value == "none" ? "" : value;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(StrCat("unknown flag ", key));
}

constexpr const char* kUsage =
    "usage: exaserve-sim cluster -f SPEC [--nodes 256] [--racks 16] [--gpus-per-node 8] "
    "[--gpu-memory 80Gi] [--schedulers 3] [--scenario kill-8-nodes|blip-20s|"
    "kill-scheduler-leader|rack-partition|canary-bad|canary-good|lifetime|leak|diurnal] "
    "[--fault-nodes 8] "
    "[--duration 120] [--seed S] "
    "[diurnal: --trace FILE [--day 86400] [--peak-load L] [--ttft-target 2]]";

}  // namespace

absl::StatusOr<ClusterSimOptions> ParseClusterSimArgs(const std::vector<std::string>& args) {
  ClusterSimOptions o;
  EXA_ASSIGN_OR_RETURN(auto flags, SplitFlags(args));
  for (const auto& [key, value] : flags) EXA_RETURN_IF_ERROR(Apply(key, value, &o));
  if (o.spec_file.empty()) return absl::InvalidArgumentError("-f SPEC is required");
  bool kills_or_cuts = o.scenario == "kill-8-nodes" || o.scenario == "blip-20s";
  if (kills_or_cuts && o.fault_nodes >= o.nodes) {
    return absl::InvalidArgumentError(
        StrCat("--fault-nodes ", o.fault_nodes, ": must be below --nodes ", o.nodes));
  }
  if (o.scenario == "diurnal" && o.trace_file.empty()) {
    return absl::InvalidArgumentError(
        "--scenario diurnal needs --trace FILE (a Mooncake trace, or a CSV trace such as "
        "Azure's LLM inference traces or BurstGPT)");
  }
  return o;
}

int ClusterSimMain(int argc, char** argv) {
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << kUsage << "\n";
      return 0;
    }
  }
  absl::StatusOr<ClusterSimOptions> options = ParseClusterSimArgs(args);
  if (!options.ok()) {
    std::cerr << "exaserve-sim cluster: " << options.status().message() << "\n" << kUsage << "\n";
    return 2;
  }
  nlohmann::json out = RunClusterSim(*options);
  if (out.contains("error")) {
    std::cerr << "exaserve-sim cluster: " << out["error"].get<std::string>() << "\n";
    return 2;
  }
  std::cout << out.dump(2) << std::endl;
  return 0;
}

}  // namespace exa::sim
