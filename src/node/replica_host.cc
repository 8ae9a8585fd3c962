#include "node/replica_host.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::node {
namespace {

std::string Positive(const int& v) { return v > 0 ? "" : StrCat(v, ": must be positive"); }

}  // namespace

void RegisterConfig(config::Schema& s, std::string_view section, InferenceOptions* o) {
  std::string p(section);
  s.Add(p + ".models", &o->models,
        "model directories (HF layout), each DIR or DIR@VERSION; empty: the bundled model");
  s.Add<int>(p + ".replicas_per_model", &o->replicas_per_model, "replicas of each model",
             [](const int& v) { return v >= 1 && v <= 64 ? "" : StrCat(v, ": expected 1-64"); });
  s.AddEnum(p + ".backend", &o->backend, {"cpu", "cuda", "sim"},
            "engine backend (cuda: replicas spread over inference.gpus; without a GPU a replica "
            "fails to start, with the reason, and the node keeps serving)");
  s.Add<std::vector<std::string>>(
      p + ".gpus", &o->gpus,
      "cuda backend: GPU indices replicas are spread over, round-robin; empty: every GPU found",
      [](const std::vector<std::string>& v) {
        for (const std::string& g : v) {
          int index = -1;
          if (!absl::SimpleAtoi(g, &index) || index < 0 || index > 255) {
            return StrCat("GPU index \"", g, "\": expected an integer 0-255");
          }
        }
        return std::string();
      });
  s.Add(p + ".burn_in", &o->burn_in,
        "cuda backend: GEMM and copy burn-in on every GPU at start; failing taints the node "
        "(burn-in-failed) and starts no replica");
  s.Add<double>(p + ".sim_slowdown", &o->sim_slowdown,
                "sim backend: factor on every modeled step time (a slow-replica drill)",
                [](const double& v) {
                  return v >= 1 && v <= 100 ? std::string() : StrCat(v, ": must be in [1, 100]");
                });
  s.Add(p + ".sim_stall_file", &o->sim_stall_file,
        "sim backend: while this file exists every step loop hangs (a drill); empty: off");
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
    candidates.push_back(bin / "../share/exaserve/models" / kBundledModelName);  // installed
    candidates.push_back(bin / "../../models" / kBundledModelName);              // build/bin
  }
  candidates.push_back(std::filesystem::current_path(ec) / "models" / kBundledModelName);
  for (const auto& c : candidates) {
    if (std::filesystem::exists(c / "config.json", ec)) {
      return std::filesystem::weakly_canonical(c, ec).string();
    }
  }
  return "";
}

std::vector<int> AssignGpus(int replicas, const std::vector<int>& gpus, int gpu_count) {
  std::vector<int> out(static_cast<size_t>(std::max(0, replicas)), 0);
  for (int i = 0; i < replicas; ++i) {
    if (!gpus.empty()) {
      out[i] = gpus[static_cast<size_t>(i) % gpus.size()];
    } else if (gpu_count > 0) {
      out[i] = i % gpu_count;
    }
  }
  return out;
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
                   {{"looked_for", kBundledModelName}});
      return absl::OkStatus();
    }
    specs.push_back(bundled);
  }
  const bool cuda = options_.backend == "cuda";
  std::vector<int> gpus;
  for (const std::string& g : options_.gpus) {
    int index = 0;
    if (absl::SimpleAtoi(g, &index)) gpus.push_back(index);  // validated by the schema
  }
  const std::vector<int> devices = AssignGpus(
      static_cast<int>(specs.size()) * options_.replicas_per_model, gpus, options_.gpu_count);
  size_t next_device = 0;
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
    eo.sim.decode_base_ms *= options_.sim_slowdown;
    eo.sim.decode_per_sequence_ms *= options_.sim_slowdown;
    eo.sim.decode_per_context_token_us *= options_.sim_slowdown;
    eo.sim.prefill_per_token_us *= options_.sim_slowdown;
    eo.sim.stall_file = options_.sim_stall_file;
    bool any = false;
    for (int i = 0; i < options_.replicas_per_model; ++i) {
      const std::string id =
          StrCat(node_id_.substr(0, 8), "/", model->name, "@", model->version, "#", i);
      const int device = cuda ? devices[next_device++] : -1;
      eo.device = std::max(device, 0);
      auto engine = engine::CreateEngine(eo, model->tokenizer);
      if (!engine.ok()) {
        // This replica alone: the node and its other replicas keep serving.
        EXA_LOG_ERROR("node", "replica failed to start",
                      {{"replica", id},
                       {"dir", model->dir},
                       {"backend", options_.backend},
                       {"device", device},
                       {"error", std::string(engine.status().message())}});
        failed_.push_back({id, model->name, model->version, options_.backend, device,
                           StrCat(absl::StatusCodeToString(engine.status().code()), ": ",
                                  engine.status().message())});
        continue;
      }
      auto replica = std::make_unique<Replica>();
      replica->id = id;
      replica->model = model.get();
      replica->engine = *std::move(engine);
      replica->device = device;
      model->info = replica->engine->info();
      by_id_[replica->id] = replica.get();
      EXA_LOG_INFO("node", "replica ready",
                   {{"replica", replica->id}, {"dir", model->dir}, {"device", device}});
      replicas_.push_back(std::move(replica));
      any = true;
    }
    // A model none of whose replicas started is not served here (no model without replicas).
    if (any) models_.push_back(std::move(model));
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

absl::StatusOr<std::vector<std::pair<std::string, ReplicaHost::Labels>>> ReplicaHost::Relabel(
    const Labels& selector, const Labels& set, const std::vector<std::string>& remove) {
  constexpr size_t kMaxLabels = 32, kMaxValue = 128;
  for (const auto& [k, v] : set) {
    if (k.empty() || k.size() > 64 || v.size() > kMaxValue) {
      return absl::InvalidArgumentError(
          StrCat("labels: \"", k, "\": keys are 1 to 64 characters, values at most ", kMaxValue));
    }
  }
  absl::MutexLock lock(&labels_mu_);
  std::vector<std::pair<std::string, Labels>> matched;
  for (const auto& r : replicas_) {
    Labels& labels = labels_[r->id];
    bool match = true;
    for (const auto& [k, v] : selector) {
      if (k == "model") {
        match &= r->model->name == v;
      } else if (k == "replica") {
        match &= r->id == v;
      } else if (k == "version" && labels.count("version") == 0) {
        match &= r->model->version == v;
      } else {
        auto it = labels.find(k);
        match &= it != labels.end() && it->second == v;
      }
    }
    if (!match) continue;
    Labels updated = labels;
    for (const auto& [k, v] : set) updated[k] = v;
    for (const std::string& k : remove) updated.erase(k);
    if (updated.size() > kMaxLabels) {
      return absl::InvalidArgumentError(StrCat("labels: at most ", kMaxLabels, " per replica"));
    }
    matched.emplace_back(r->id, updated);
  }
  for (const auto& [id, labels] : matched) labels_[id] = labels;
  labels_version_++;
  if (!matched.empty()) EXA_RETURN_IF_ERROR(SaveLabelsLocked());
  return matched;
}

ReplicaHost::Labels ReplicaHost::LabelsOf(const std::string& replica_id) const {
  absl::MutexLock lock(&labels_mu_);
  auto it = labels_.find(replica_id);
  return it == labels_.end() ? Labels{} : it->second;
}

absl::Status ReplicaHost::UseLabelsFile(std::string path) {
  absl::MutexLock lock(&labels_mu_);
  labels_path_ = std::move(path);
  if (!std::filesystem::exists(labels_path_)) return absl::OkStatus();
  std::ifstream in(labels_path_);
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(labels_path_, ": expected a JSON object of replica id → labels"));
  }
  for (const auto& [id, labels] : doc.items()) {
    if (!labels.is_object()) continue;
    Labels& out = labels_[id];
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  return absl::OkStatus();
}

absl::Status ReplicaHost::SaveLabelsLocked() const {
  if (labels_path_.empty()) return absl::OkStatus();
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [id, labels] : labels_) {
    if (!labels.empty()) doc[id] = labels;
  }
  std::string tmp = labels_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump(2) << "\n";
    out.flush();
    if (!out) return absl::InternalError(StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, labels_path_, ec);
  if (ec) return absl::InternalError(StrCat("cannot rename ", tmp, ": ", ec.message()));
  return absl::OkStatus();
}

std::vector<const ServedModel*> ReplicaHost::models() const {
  std::vector<const ServedModel*> out;
  for (const auto& m : models_) out.push_back(m.get());
  return out;
}

}  // namespace exa::node
