#include "node/replica_host.h"

#include <unistd.h>

#include <filesystem>

#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::node {
namespace {

constexpr char kBundledModel[] = "exa-tiny-arith";

std::string Positive(const int& v) { return v > 0 ? "" : StrCat(v, ": must be positive"); }

}  // namespace

void RegisterConfig(config::Schema& s, std::string_view section, InferenceOptions* o) {
  std::string p(section);
  s.Add(p + ".models", &o->models,
        "model directories (HF layout), each DIR or DIR@VERSION; empty: the bundled model");
  s.Add<int>(p + ".replicas_per_model", &o->replicas_per_model, "replicas of each model",
             [](const int& v) { return v >= 1 && v <= 64 ? "" : StrCat(v, ": expected 1-64"); });
  s.AddEnum(
      p + ".backend", &o->backend, {"cpu", "cuda", "sim"},
      "engine backend (cuda: GPU 0; without a GPU a replica fails to start, with the reason)");
  s.Add<int>(p + ".threads", &o->threads, "CPU threads per replica; 0: one per hardware thread",
             [](const int& v) { return v >= 0 ? "" : StrCat(v, ": must be >= 0"); });
  s.Add(p + ".kv_cache_bytes", &o->kv_cache_bytes, "KV cache per replica, reserved at start");
  s.Add<int>(p + ".max_batch_tokens", &o->max_batch_tokens, "tokens per engine step", Positive);
  s.Add<int>(p + ".max_running", &o->max_running, "sequences batched at once", Positive);
  s.Add<int>(p + ".max_queue", &o->max_queue,
             "requests waiting per replica; beyond this: RESOURCE_EXHAUSTED", Positive);
}

std::string FindBundledModel() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> candidates;
  if (!ec) {
    auto bin = exe.parent_path();
    candidates.push_back(bin / "../share/exaserve/models" / kBundledModel);  // installed
    candidates.push_back(bin / "../../models" / kBundledModel);              // build/bin
  }
  candidates.push_back(std::filesystem::current_path(ec) / "models" / kBundledModel);
  for (const auto& c : candidates) {
    if (std::filesystem::exists(c / "config.json", ec)) {
      return std::filesystem::weakly_canonical(c, ec).string();
    }
  }
  return "";
}

ReplicaHost::ReplicaHost(std::string node_id, InferenceOptions options)
    : node_id_(std::move(node_id)), options_(std::move(options)) {}

ReplicaHost::~ReplicaHost() { Stop(); }

absl::Status ReplicaHost::Start() {
  std::vector<std::string> specs = options_.models;
  if (specs.empty()) {
    std::string bundled = FindBundledModel();
    if (bundled.empty()) {
      EXA_LOG_WARN("node", "no model configured and the bundled model was not found",
                   {{"looked_for", kBundledModel}});
      return absl::OkStatus();
    }
    specs.push_back(bundled);
  }
  for (const std::string& spec : specs) {
    size_t at = spec.rfind('@');
    auto model = std::make_unique<ServedModel>();
    model->dir = spec.substr(0, at);
    model->version = at == std::string::npos ? "v1" : spec.substr(at + 1);
    model->name = std::filesystem::path(model->dir).filename().string();
    if (model->name.empty())
      model->name = std::filesystem::path(model->dir).parent_path().filename();
    auto tokenizer = engine::LoadDetokenizer(model->dir);
    if (!tokenizer.ok()) return Annotate(tokenizer.status(), StrCat("model ", model->dir));
    model->tokenizer = *tokenizer;
    engine::EngineOptions eo;
    eo.model_dir = model->dir;
    eo.backend = options_.backend;
    eo.threads = options_.threads;
    eo.kv_cache_bytes = static_cast<int64_t>(options_.kv_cache_bytes.value);
    eo.max_batch_tokens = options_.max_batch_tokens;
    eo.max_running = options_.max_running;
    eo.max_queue = options_.max_queue;
    for (int i = 0; i < options_.replicas_per_model; ++i) {
      auto engine = engine::CreateEngine(eo, model->tokenizer);
      if (!engine.ok()) return Annotate(engine.status(), StrCat("model ", model->dir));
      auto replica = std::make_unique<Replica>();
      replica->id = StrCat(node_id_.substr(0, 8), "/", model->name, "@", model->version, "#", i);
      replica->model = model.get();
      replica->engine = *std::move(engine);
      model->info = replica->engine->info();
      by_id_[replica->id] = replica.get();
      EXA_LOG_INFO("node", "replica ready", {{"replica", replica->id}, {"dir", model->dir}});
      replicas_.push_back(std::move(replica));
    }
    models_.push_back(std::move(model));
  }
  return absl::OkStatus();
}

void ReplicaHost::Stop() {
  for (auto& r : replicas_) r->engine->Stop();
}

engine::Engine* ReplicaHost::FindEngine(const std::string& replica_id) const {
  auto it = by_id_.find(replica_id);
  return it == by_id_.end() ? nullptr : it->second->engine.get();
}

const ServedModel* ReplicaHost::FindModel(const std::string& name,
                                          const std::string& version) const {
  for (const auto& m : models_) {
    if (m->name == name && (version.empty() || m->version == version)) return m.get();
  }
  return nullptr;
}

std::vector<const ServedModel*> ReplicaHost::models() const {
  std::vector<const ServedModel*> out;
  for (const auto& m : models_) out.push_back(m.get());
  return out;
}

}  // namespace exa::node
