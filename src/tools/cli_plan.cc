#include "tools/cli_plan.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "engine/model_config.h"
#include "nlohmann/json.hpp"
#include "scheduler/memory_planner.h"
#include "tools/cli_common.h"

namespace exa::tools {
namespace {

using scheduler::ModelShape;
using scheduler::Precision;

int Fail(const absl::Status& s) { return Usage(ToStd(s.message()), "plan"); }

// The shape from `<dir>/config.json`, its torch_dtype, and the safetensors files' total size.
absl::StatusOr<ModelShape> ShapeFromDir(const std::string& dir) {
  EXA_ASSIGN_OR_RETURN(engine::ModelConfig config, engine::LoadModelConfig(dir));
  std::filesystem::path path(dir);
  ModelShape shape = scheduler::ShapeFromConfig(path.filename().string(), config);
  EXA_ASSIGN_OR_RETURN(std::string text,
                       ReadFile((path / "config.json").string(), engine::kMaxModelConfigBytes));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("torch_dtype") && j["torch_dtype"].is_string()) {
    auto p = scheduler::ParsePrecision(j["torch_dtype"].get<std::string>());
    if (p.ok()) shape.dtype = *p;
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file()) {
      shape.checkpoint_bytes += entry.file_size();
    }
  }
  if (ec) return absl::NotFoundError(StrCat(dir, ": ", ec.message()));
  return shape;
}

nlohmann::json ToJson(const scheduler::PlanInput& in, const scheduler::MemoryPlan& p) {
  return {{"model", in.model.name},
          {"parameters", in.model.parameters},
          {"dtype", scheduler::PrecisionName(in.weight_dtype)},
          {"kv_dtype", scheduler::PrecisionName(in.kv_dtype)},
          {"context", in.context},
          {"concurrency", in.concurrency},
          {"weight_bytes", p.weight_bytes},
          {"kv_bytes_per_token", p.kv_bytes_per_token},
          {"kv_bytes", p.kv_bytes},
          {"activation_bytes", p.activation_bytes},
          {"runtime_bytes", p.runtime_bytes},
          {"fragmentation_bytes", p.fragmentation_bytes},
          {"headroom_bytes", p.headroom_bytes},
          {"replica_bytes", p.replica_bytes},
          {"replica_gb", p.replica_bytes / 1e9},
          {"gpu_memory_bytes", in.gpu_memory_bytes},
          {"gpus_per_node", in.gpus_per_node},
          {"replicas_per_node", p.replicas_per_node},
          {"replicas_per_node_pooled", p.replicas_per_node_pooled},
          {"node_bytes", p.node_bytes},
          {"node_bytes_used", p.node_bytes_used}};
}

}  // namespace

CLI::App* AddPlanCommand(CLI::App& app, PlanOptions& o) {
  CLI::App* plan = app.add_subcommand("plan",
                                      "GPU memory per replica and replicas per node "
                                      "(docs/architecture.md#memory-arithmetic), computed offline");
  auto* model = plan->add_option("--model", o.model_dir, "a Hugging Face checkpoint directory");
  auto* preset = plan->add_option(
      "--preset", o.preset,
      "a built-in model: llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, llama-3-70b, "
      "mistral-7b");
  model->excludes(preset);
  plan->add_option("--dtype", o.dtype, "weights: fp32, fp16, bf16, fp8, int8 (default: fp16)");
  plan->add_option("--kv-dtype", o.kv_dtype, "KV cache dtype (default: --dtype)");
  plan->add_option("--context", o.context, "tokens per sequence (default 4096)");
  plan->add_option("--concurrency", o.concurrency, "sequences per replica (default 4)");
  plan->add_option("--gpu-memory", o.gpu_memory, "memory per GPU, e.g. 80Gi (default 80Gi)");
  plan->add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default 8)");
  plan->add_option("--gpus-per-replica", o.gpus_per_replica, "at least this many (default 1)");
  plan->add_option("--headroom", o.headroom, "share of a reservation kept free (default 0.15)");
  plan->add_option("--fragmentation", o.fragmentation,
                   "share reserved for allocator fragmentation (default 0.08)");
  plan->add_flag("--json", o.json, "print JSON instead of the table");
  return plan;
}

int RunPlan(const PlanOptions& o, bool json) {
  json = json || o.json;
  if (o.model_dir.empty() == o.preset.empty()) {
    return Fail(absl::InvalidArgumentError("give exactly one of --model DIR or --preset NAME"));
  }
  scheduler::PlanInput in;
  if (!o.preset.empty()) {
    auto shape = scheduler::PresetModel(o.preset);
    if (!shape) {
      std::string names;
      for (const std::string& n : scheduler::PresetNames()) {
        StrAppend(&names, names.empty() ? "" : ", ", n);
      }
      return Fail(absl::InvalidArgumentError(
          StrCat("--preset \"", o.preset, "\": unknown; expected one of ", names)));
    }
    in.model = *shape;
  } else {
    auto shape = ShapeFromDir(o.model_dir);
    if (!shape.ok()) return Fail(shape.status());
    in.model = *shape;
  }
  in.weight_dtype = in.model.dtype;
  if (!o.dtype.empty()) {
    auto p = scheduler::ParsePrecision(o.dtype);
    if (!p.ok()) return Fail(Annotate(p.status(), "--dtype"));
    in.weight_dtype = *p;
  }
  in.kv_dtype = in.weight_dtype;
  if (!o.kv_dtype.empty()) {
    auto p = scheduler::ParsePrecision(o.kv_dtype);
    if (!p.ok()) return Fail(Annotate(p.status(), "--kv-dtype"));
    in.kv_dtype = *p;
  }
  auto gpu = ParseBytes(o.gpu_memory);
  if (!gpu.ok()) return Fail(Annotate(gpu.status(), "--gpu-memory"));
  in.gpu_memory_bytes = *gpu;
  in.context = o.context;
  in.concurrency = o.concurrency;
  in.gpus_per_node = o.gpus_per_node;
  in.gpus_per_replica = o.gpus_per_replica;
  in.headroom = o.headroom;
  in.fragmentation = o.fragmentation;
  auto plan = scheduler::PlanMemory(in);
  if (!plan.ok()) return Fail(plan.status());
  if (json) {
    std::cout << ToJson(in, *plan).dump(2) << "\n";
  } else {
    std::cout << scheduler::FormatPlan(in, *plan);
  }
  return 0;
}

}  // namespace exa::tools
