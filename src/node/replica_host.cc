#include "node/replica_host.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "cluster/label_rule.h"
#include "common/chars.h"
#include "common/logging.h"
#include "common/prefix_delta.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "node/store_name.h"

namespace exa::node {
namespace {

// What a replica may reserve of a device (KV cache or whole budget): 4 TiB, past any GPU or
// host, and far from int64 overflow when the ledger adds reservations up.
constexpr int64_t kMaxReplicaBytes = int64_t{1} << 42;

}  // namespace

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
    : node_id_(std::move(node_id)), options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < options_.gpu_memory_bytes.size(); ++i) {
    ledger_.SetCapacity(static_cast<int>(i),
                        static_cast<int64_t>(static_cast<double>(options_.gpu_memory_bytes[i]) *
                                             options_.gpu_memory_utilization));
  }
  ledger_.SetCapacity(-1, static_cast<int64_t>(options_.host_memory_budget.value));
}

ReplicaHost::~ReplicaHost() { Stop(); }

absl::StatusOr<int64_t> EstimateWeightBytes(const std::string& dir) {
  std::error_code ec;
  int64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") {
      bytes += static_cast<int64_t>(entry.file_size(ec));
    }
  }
  if (ec) return absl::NotFoundError(StrCat("model_dir: \"", dir, "\": ", ec.message()));
  return bytes + bytes / 20 + (int64_t{64} << 20);
}

engine::EngineOptions ReplicaHost::EngineOptionsFor(const ServedModel& model,
                                                    const std::string& backend, int device,
                                                    int64_t kv_cache_bytes) const {
  engine::EngineOptions eo;
  eo.model_dir = model.dir;
  eo.backend = backend;
  eo.device = std::max(device, 0);
  eo.threads = options_.threads;
  eo.cpu_bf16_activations = options_.cpu_bf16_activations;
  eo.kv_cache_bytes = kv_cache_bytes;
  eo.max_batch_tokens = options_.max_batch_tokens;
  eo.max_running = options_.max_running;
  eo.max_queue = options_.max_queue;
  eo.prefix_cache = options_.prefix_cache;
  // Replicas of one model and version on one backend compute the same K and V for a prefix.
  eo.prefix_cache_namespace = CacheNamespace(model.name, model.version, backend);
  const auto& slow = options_.sim_slow_versions;
  const double slowdown =
      slow.empty() || std::find(slow.begin(), slow.end(), model.version) != slow.end()
          ? options_.sim_slowdown
          : 1.0;
  eo.sim.decode_base_ms *= slowdown;
  eo.sim.decode_per_sequence_ms *= slowdown;
  eo.sim.decode_per_context_token_us *= slowdown;
  eo.sim.prefill_per_token_us *= slowdown;
  eo.sim.stall_file = options_.sim_stall_file;
  const auto& failing = options_.sim_failing_versions;
  if (failing.empty() ||
      std::find(failing.begin(), failing.end(), model.version) != failing.end()) {
    eo.sim.fail_every_steps = options_.sim_fail_every_steps;
  }
  const auto& leaking = options_.sim_leaking_versions;
  if (leaking.empty() ||
      std::find(leaking.begin(), leaking.end(), model.version) != leaking.end()) {
    eo.sim.leak_bytes_per_step = static_cast<int64_t>(options_.sim_leak_bytes_per_step.value);
  }
  return eo;
}

absl::StatusOr<ServedModel*> ReplicaHost::ModelFor(const std::string& dir,
                                                   const std::string& version,
                                                   const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    for (const auto& m : models_) {
      if (m->dir == dir && m->version == version) return m.get();
    }
  }
  auto model = std::make_unique<ServedModel>();
  model->dir = dir;
  model->version = version;
  model->name = name.empty() ? std::filesystem::path(dir).filename().string() : name;
  if (model->name.empty()) model->name = std::filesystem::path(dir).parent_path().filename();
  auto tokenizer = engine::LoadDetokenizer(dir);
  if (!tokenizer.ok()) return Annotate(tokenizer.status(), StrCat("model ", dir));
  model->tokenizer = *tokenizer;
  absl::MutexLock lock(&mu_);
  for (const auto& m : models_) {  // loaded meanwhile by another start
    if (m->dir == dir && m->version == version) return m.get();
  }
  models_.push_back(std::move(model));
  return models_.back().get();
}

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
  for (const std::string& text : specs) {
    const size_t at = text.rfind('@');
    ReplicaSpec spec;
    spec.model_dir = text.substr(0, at);
    spec.version = at == std::string::npos ? "v1" : text.substr(at + 1);
    EXA_ASSIGN_OR_RETURN(ServedModel * model,
                         ModelFor(spec.model_dir, spec.version, options_.served_model_name));
    for (int i = 0; i < options_.replicas_per_model; ++i) {
      spec.replica_id =
          StrCat(node_id_.substr(0, 8), "/", model->name, "@", model->version, "#", i);
      spec.device = cuda ? devices[next_device++] : -1;
      absl::StatusOr<ReplicaView> admitted = Admit(spec, model);
      if (!admitted.ok()) {
        EXA_LOG_ERROR(
            "node", "replica failed to start",
            {{"replica", spec.replica_id}, {"error", std::string(admitted.status().message())}});
        // Listed as failed, with the ledger's numbers, like a replica whose engine failed.
        absl::MutexLock lock(&mu_);
        Entry entry;
        entry.replica = std::make_shared<Replica>();
        entry.replica->id = spec.replica_id;
        entry.replica->model = model;
        entry.replica->device = spec.device;
        entry.replica->backend = options_.backend;
        entry.state = "failed";
        entry.reason = StrCat(absl::StatusCodeToString(admitted.status().code()), ": ",
                              admitted.status().message());
        entry.since = absl::Now();
        entries_[spec.replica_id] = std::move(entry);
        history_.push_back(spec.replica_id);
        continue;
      }
      Load(spec.replica_id, EngineOptionsFor(*model, options_.backend, spec.device,
                                             static_cast<int64_t>(options_.kv_cache_bytes.value)));
    }
  }
  NotifyChange();
  return absl::OkStatus();
}

absl::StatusOr<ReplicaView> ReplicaHost::StartReplica(const ReplicaSpec& spec) {
  if (spec.model_dir.empty() && spec.model.empty()) {
    return absl::InvalidArgumentError(
        "model_dir: empty; give a model directory on this node, or model: a name to pull");
  }
  // The version names a weights directory and a label value; the id lands in logs and metric
  // labels. (Reserved label keys are allowed here: the scheduler sets them.)
  if (spec.version.size() > 64 || !StoreNameOk(spec.version) || !OnlyAlnumOr(spec.version, "._-")) {
    return absl::InvalidArgumentError(
        StrCat("version: \"", spec.version, "\": 1 to 64 of letters, digits, '.', '_', '-'"));
  }
  if (spec.replica_id.size() > 256 || HasSpaceOrControl(spec.replica_id)) {
    return absl::InvalidArgumentError(StrCat("replica_id: \"", spec.replica_id.substr(0, 80),
                                             "\": at most 256 characters, no spaces"));
  }
  EXA_RETURN_IF_ERROR(cluster::ValidateLabels(spec.labels));
  if (spec.labels.size() > cluster::kMaxLabelsPerReplica) {
    return absl::InvalidArgumentError(StrCat("labels: ", spec.labels.size(), "; at most ",
                                             cluster::kMaxLabelsPerReplica, " per replica"));
  }
  if (HasAsciiControl(spec.model_dir)) {
    return absl::InvalidArgumentError("model_dir: a path without control characters");
  }
  const std::string backend = spec.backend.empty() ? options_.backend : spec.backend;
  if (backend != "cpu" && backend != "cuda" && backend != "sim") {
    return absl::InvalidArgumentError(StrCat("backend: \"", backend, "\": cpu, cuda or sim"));
  }
  // A device on a host backend would be silently meaningless: the caller meant a GPU.
  if (spec.device >= 0 && backend != "cuda") {
    return absl::InvalidArgumentError(StrCat("device: ", spec.device,
                                             " applies to the cuda backend only; this replica's "
                                             "backend is ",
                                             backend, " (omit device)"));
  }
  if (backend == "cuda" && options_.gpu_count > 0 && spec.device >= options_.gpu_count) {
    return absl::InvalidArgumentError(StrCat("device: ", spec.device, ": this node has ",
                                             options_.gpu_count, " GPUs (0 to ",
                                             options_.gpu_count - 1, ")"));
  }
  for (const auto& [field, bytes] :
       {std::pair<const char*, int64_t>{"kv_cache_bytes", spec.kv_cache_bytes},
        {"memory_budget_bytes", spec.memory_budget_bytes}}) {
    if (bytes < 0 || bytes > kMaxReplicaBytes) {
      return absl::InvalidArgumentError(StrCat(field, ": ", bytes, ": allowed 0 (the default) to ",
                                               BytesToString(kMaxReplicaBytes)));
    }
  }
  if (spec.generation < 0) {
    return absl::InvalidArgumentError(
        StrCat("generation: ", spec.generation, ": must not be negative"));
  }
  const int64_t kv_bytes = spec.kv_cache_bytes > 0
                               ? spec.kv_cache_bytes
                               : static_cast<int64_t>(options_.kv_cache_bytes.value);
  if (spec.memory_budget_bytes > 0 && spec.memory_budget_bytes < kv_bytes) {
    // The budget is what the ledger holds for the replica: it cannot be less than the KV cache
    // the replica reserves at start.
    return absl::InvalidArgumentError(
        StrCat("memory_budget_bytes: ", BytesToString(spec.memory_budget_bytes),
               " is less than the replica's KV cache (", BytesToString(kv_bytes), ")"));
  }
  if (spec.model_dir.empty()) {
    ReplicaSpec pulled = spec;
    pulled.backend = backend;
    return StartFromStore(pulled);
  }
  if (backend != "sim" && !std::filesystem::exists(spec.model_dir + "/config.json")) {
    return absl::InvalidArgumentError(
        StrCat("model_dir: \"", spec.model_dir, "\" has no config.json on node ", node_id_));
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the node is stopping");
    if (!refusal_.empty()) return absl::FailedPreconditionError(refusal_);
    // Fast path: the same (id, generation) again returns before any model is read.
    if (auto existing = ExistingLocked(spec, backend)) return *existing;
  }
  EXA_ASSIGN_OR_RETURN(ServedModel * model, ModelFor(spec.model_dir, spec.version));
  ReplicaSpec admitted = spec;
  admitted.backend = backend;
  EXA_ASSIGN_OR_RETURN(ReplicaView view, Admit(admitted, model));
  const int64_t kv = spec.kv_cache_bytes > 0 ? spec.kv_cache_bytes
                                             : static_cast<int64_t>(options_.kv_cache_bytes.value);
  engine::EngineOptions eo = EngineOptionsFor(*model, backend, view.device, kv);
  absl::MutexLock lock(&mu_);
  workers_.emplace_back([this, id = view.id, eo] { Load(id, eo); });
  return view;
}

std::optional<absl::StatusOr<ReplicaView>> ReplicaHost::ExistingLocked(
    const ReplicaSpec& spec, const std::string& backend) const {
  const std::string& id = spec.replica_id;
  if (id.empty()) return std::nullopt;
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state == "stopped" || it->second.state == "failed") {
    return std::nullopt;
  }
  const Entry& e = it->second;
  if (e.replica->generation != spec.generation) {
    return absl::FailedPreconditionError(StrCat("replica ", id, " runs generation ",
                                                e.replica->generation, ", not ", spec.generation,
                                                "; stop it first"));
  }
  const std::string& source = spec.model_dir.empty() ? spec.model : spec.model_dir;
  if (e.source != source || e.version != spec.version || e.replica->backend != backend) {
    return absl::AlreadyExistsError(StrCat("replica ", id, " generation ", spec.generation,
                                           " already runs ", e.source, "@", e.version, " on ",
                                           e.replica->backend, ", not ", source, "@", spec.version,
                                           " on ", backend, "; stop it first or use another id"));
  }
  return ViewLocked(e);
}

std::string ReplicaHost::NextIdLocked(const std::string& name, const std::string& version) const {
  for (int n = 0;; ++n) {
    std::string id = StrCat(node_id_.substr(0, 8), "/", name, "@", version, "#", n);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.state == "stopped" || it->second.state == "failed") {
      return id;
    }
  }
}

absl::Status ReplicaHost::ReserveLocked(Entry& entry, const ReplicaSpec& spec, int64_t weights) {
  Replica& r = *entry.replica;
  const bool cuda = r.backend == "cuda";
  const int64_t kv = spec.kv_cache_bytes > 0 ? spec.kv_cache_bytes
                                             : static_cast<int64_t>(options_.kv_cache_bytes.value);
  int device = -1;
  if (cuda) {
    device = spec.device;
    if (device < 0) {
      std::vector<int> all;
      for (int g = 0; g < std::max<int>(1, options_.gpu_count); ++g) all.push_back(g);
      device = std::max(0, ledger_.BestFit(all, kv));
    }
  }
  // Replicas of one model on one GPU share one weight copy (engine/cuda/device_weights.h): the
  // ledger holds the weights once per (model, GPU) and each replica's own KV cache and runtime.
  // On the host every replica maps the same checkpoint; the page cache holds it once too.
  const std::string holder = StrCat("weights:", r.model->dir, "@", r.model->version, "/",
                                    cuda ? StrCat("gpu", device) : std::string("host"));
  const int64_t own = spec.memory_budget_bytes > 0 ? spec.memory_budget_bytes : kv;
  const bool first_on_device = !ledger_.Holds(holder);
  if (first_on_device) EXA_RETURN_IF_ERROR(ledger_.Reserve(holder, cuda ? device : -1, weights));
  if (absl::Status s = ledger_.Reserve(r.id, cuda ? device : -1, own); !s.ok()) {
    if (first_on_device) ledger_.Release(holder);
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      return absl::FailedPreconditionError(StrCat("replica ", r.id, " is still stopping"));
    }
    return s;
  }
  r.device = device;
  r.budget_bytes = own;
  entry.weights_holder = holder;
  return absl::OkStatus();
}

absl::StatusOr<ReplicaView> ReplicaHost::StartFromStore(const ReplicaSpec& spec) {
  if (!StoreNameOk(spec.model)) {
    return absl::InvalidArgumentError(
        StrCat("model: \"", spec.model,
               "\": a model name (1-128 characters, no '/', spaces or control characters)"));
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the node is stopping");
  if (!refusal_.empty()) return absl::FailedPreconditionError(refusal_);
  if (!fetch_) {
    return absl::FailedPreconditionError(
        "model: this node has no weights fetcher; give model_dir, a directory on the node");
  }
  std::string id = spec.replica_id;
  if (auto existing = ExistingLocked(spec, spec.backend)) return *existing;
  placeholders_.push_back(std::make_unique<ServedModel>());
  ServedModel* placeholder = placeholders_.back().get();
  placeholder->name = spec.model;
  placeholder->version = spec.version;
  if (id.empty()) id = NextIdLocked(spec.model, spec.version);
  Entry entry;
  entry.replica = std::make_shared<Replica>();
  entry.replica->id = id;
  entry.replica->model = placeholder;
  entry.replica->backend = spec.backend;
  entry.replica->generation = spec.generation;
  entry.source = spec.model;
  entry.version = spec.version;
  entry.state = "pending";
  entry.since = absl::Now();
  history_.erase(std::remove(history_.begin(), history_.end(), id), history_.end());
  entries_[id] = std::move(entry);
  AddLabels(id, spec.labels);
  EXA_LOG_INFO("node", "replica admitted, pulling its model",
               {{"replica", id}, {"model", StrCat(spec.model, ":", spec.version)}});
  workers_.emplace_back([this, id, spec] { PullAndLoad(id, spec); });
  return ViewLocked(entries_[id]);
}

void ReplicaHost::PullAndLoad(std::string id, ReplicaSpec spec) {
  ModelFetch fetch;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.state != "pending") return;
    SetState(id, "loading",
             StrCat("pulling ", spec.model, ":", spec.version, " into the node cache"));
    fetch = fetch_;
  }
  auto fail = [&](const absl::Status& s) {
    EXA_LOG_ERROR("node", "replica failed to start",
                  {{"replica", id}, {"model", spec.model}, {"error", std::string(s.message())}});
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.state != "loading") return;
    SetState(id, "failed", StrCat(absl::StatusCodeToString(s.code()), ": ", s.message()));
    ReleaseLocked(it->second);
    TrimHistoryLocked();
  };
  absl::StatusOr<std::string> dir = fetch(spec.model, spec.version);
  if (!dir.ok()) return fail(dir.status());
  if (!spec.version.empty()) {
    absl::MutexLock lock(&mu_);
    if (staging_.size() < kMaxStagedModels ||
        staging_.count(StrCat(spec.model, "@", spec.version))) {
      staging_[StrCat(spec.model, "@", spec.version)] = Staging{"staged", *dir};
    }
  }
  absl::StatusOr<ServedModel*> model = ModelFor(*dir, spec.version, spec.model);
  if (!model.ok()) return fail(model.status());
  absl::StatusOr<int64_t> weights = spec.backend == "sim" ? 0 : EstimateWeightBytes(*dir);
  if (!weights.ok()) return fail(weights.status());
  const int64_t kv = spec.kv_cache_bytes > 0 ? spec.kv_cache_bytes
                                             : static_cast<int64_t>(options_.kv_cache_bytes.value);
  engine::EngineOptions eo;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.state != "loading") return;  // stopped meanwhile
    it->second.replica->model = *model;
    // The ledger, now that the size is known: refused here, before anything loads.
    if (absl::Status s = ReserveLocked(it->second, spec, *weights); !s.ok()) {
      SetState(id, "failed", StrCat(absl::StatusCodeToString(s.code()), ": ", s.message()));
      history_.push_back(id);
      TrimHistoryLocked();
      return;
    }
    eo = EngineOptionsFor(**model, spec.backend, it->second.replica->device, kv);
  }
  Load(id, eo);
}

void ReplicaHost::SetRefusal(std::string reason) {
  absl::MutexLock lock(&mu_);
  refusal_ = std::move(reason);
}

absl::StatusOr<ReplicaView> ReplicaHost::Admit(const ReplicaSpec& spec, ServedModel* model) {
  const std::string backend = spec.backend.empty() ? options_.backend : spec.backend;
  int64_t weights = 0;
  if (backend != "sim") {
    EXA_ASSIGN_OR_RETURN(weights, EstimateWeightBytes(model->dir));
  }
  absl::MutexLock lock(&mu_);
  std::string id = spec.replica_id;
  // Again under the lock that admits: a concurrent StartReplica of the same id may have won.
  if (auto existing = ExistingLocked(spec, backend)) return *existing;
  if (id.empty()) id = NextIdLocked(model->name, model->version);
  Entry entry;
  entry.replica = std::make_shared<Replica>();
  entry.replica->id = id;
  entry.replica->model = model;
  entry.replica->backend = backend;
  entry.replica->generation = spec.generation;
  entry.source = spec.model_dir.empty() ? spec.model : spec.model_dir;
  entry.version = spec.version;
  EXA_RETURN_IF_ERROR(ReserveLocked(entry, spec, weights));
  entry.state = "pending";
  entry.since = absl::Now();
  history_.erase(std::remove(history_.begin(), history_.end(), id), history_.end());
  entries_[id] = std::move(entry);
  const int device = entries_[id].replica->device;
  const int64_t own = entries_[id].replica->budget_bytes;
  AddLabels(id, spec.labels);
  EXA_LOG_INFO("node", "replica admitted",
               {{"replica", id},
                {"dir", model->dir},
                {"backend", backend},
                {"device", device},
                {"budget_bytes", own},
                {"generation", spec.generation}});
  return ViewLocked(entries_[id]);
}

void ReplicaHost::Load(std::string id, engine::EngineOptions eo) {
  const ServedModel* model = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    const bool startable =
        it != entries_.end() && (it->second.state == "pending" || it->second.state == "loading");
    if (!startable) return;
    SetState(id, "loading", "");
    model = it->second.replica->model;
  }
  auto engine = engine::CreateEngine(eo, model->tokenizer);
  if (!engine.ok()) {
    EXA_LOG_ERROR("node", "replica failed to start",
                  {{"replica", id},
                   {"dir", model->dir},
                   {"backend", eo.backend},
                   {"device", eo.device},
                   {"error", std::string(engine.status().message())}});
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    SetState(
        id, "failed",
        StrCat(eo.backend == "cuda" ? StrCat("GPU ", eo.device, ": ") : std::string(),
               absl::StatusCodeToString(engine.status().code()), ": ", engine.status().message()));
    ReleaseLocked(it->second);
    TrimHistoryLocked();
    return;
  }
  std::shared_ptr<engine::Engine> shared(std::move(*engine));
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.state != "loading") {  // stopped while loading
      shared->Stop();
      return;
    }
    it->second.replica->engine = shared;
    SetState(id, "warming", "");
  }
  // Warm-up: one greedy token, so the first real request pays no lazy initialisation (kernel
  // loading, cuBLAS heuristics, page faults on the weights).
  {
    absl::Mutex done_mu;
    bool done = false;
    engine::GenerateRequest warm;
    warm.prompt_tokens = model->tokenizer->tokenizer().Encode("1+1=", true);
    if (warm.prompt_tokens.empty()) warm.prompt_tokens = {0};
    warm.max_tokens = 1;
    warm.ignore_eos = true;
    warm.priority = true;
    warm.callback = [&](const engine::StreamEvent& e) {
      if (!e.finished) return;
      absl::MutexLock l(&done_mu);
      done = true;
    };
    if (shared->Submit(std::move(warm)).ok()) {
      absl::MutexLock l(&done_mu);
      done_mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.state != "warming") return;
    // The model's info (context length for the gateway) comes from its first ready replica;
    // readers see the model only once a replica is ready (models() reads under mu_).
    if (model->info.vocab_size == 0) const_cast<ServedModel*>(model)->info = shared->info();
    SetState(id, "ready", "");
  }
  EXA_LOG_INFO("node", "replica ready",
               {{"replica", id}, {"dir", model->dir}, {"device", eo.device}});
  NotifyChange();
}

absl::StatusOr<ReplicaView> ReplicaHost::StopReplica(const std::string& id, bool drain,
                                                     absl::Duration timeout) {
  ReplicaView view;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      return absl::NotFoundError(StrCat("replica_id: \"", id, "\" is not on node ", node_id_));
    }
    Entry& e = it->second;
    if (e.state == "draining" || e.state == "stopped" || e.state == "failed") {
      return ViewLocked(e);
    }
    const bool loaded = e.replica->engine != nullptr;
    SetState(id, loaded ? "draining" : "stopped",
             drain ? "StopReplica (drain)" : "StopReplica (immediate)");
    if (!loaded) {  // pending or loading: the loader sees the state and discards its engine
      ReleaseLocked(e);
      TrimHistoryLocked();
    }
    view = ViewLocked(e);
    if (loaded) {
      const absl::Duration limit =
          timeout > absl::ZeroDuration() ? timeout : options_.drain_timeout;
      workers_.emplace_back([this, id, drain, limit] { Drain(id, drain, limit); });
    }
  }
  NotifyChange();  // out of the serving set now
  return view;
}

void ReplicaHost::Drain(std::string id, bool drain, absl::Duration timeout) {
  std::shared_ptr<engine::Engine> engine;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    engine = it->second.replica->engine;
  }
  if (drain && engine) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (engine->Load().in_flight == 0) break;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (engine) engine->Stop();  // what is left ends CANCELLED
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.replica->engine.reset();
  SetState(id, "stopped", it->second.reason);
  ReleaseLocked(it->second);
  TrimHistoryLocked();
  EXA_LOG_INFO("node", "replica stopped", {{"replica", id}, {"reason", it->second.reason}});
}

void ReplicaHost::SetState(const std::string& id, std::string state, std::string reason) {
  Entry& e = entries_.at(id);
  e.state = std::move(state);
  e.reason = std::move(reason);
  e.since = absl::Now();
}

void ReplicaHost::ReleaseLocked(Entry& e) {
  ledger_.Release(e.replica->id);
  // The shared weights go with the last replica of the model on that device.
  bool others = false;
  for (const auto& [id, other] : entries_) {
    if (&other != &e && other.weights_holder == e.weights_holder && other.state != "stopped" &&
        other.state != "failed") {
      others = true;
    }
  }
  if (!others) ledger_.Release(e.weights_holder);
  history_.push_back(e.replica->id);
}

void ReplicaHost::TrimHistoryLocked() {
  constexpr size_t kKeep = 64;  // stopped and failed replicas listed, newest last
  while (history_.size() > kKeep) {
    auto it = entries_.find(history_.front());
    if (it != entries_.end() && (it->second.state == "stopped" || it->second.state == "failed")) {
      entries_.erase(it);
    }
    history_.erase(history_.begin());
  }
}

ReplicaView ReplicaHost::ViewLocked(const Entry& e) const {
  ReplicaView v;
  v.id = e.replica->id;
  v.model = e.replica->model->name;
  v.version = e.replica->model->version;
  v.backend = e.replica->backend;
  v.device = e.replica->device;
  v.generation = e.replica->generation;
  v.budget_bytes = e.replica->budget_bytes;
  v.state = e.state;
  v.reason = e.reason;
  v.since = e.since;
  v.engine = e.replica->engine;
  return v;
}

void ReplicaHost::Stop() {
  std::vector<std::thread> workers;
  std::vector<std::shared_ptr<engine::Engine>> engines;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    workers.swap(workers_);
    for (auto& [id, e] : entries_) {
      if (e.replica->engine) engines.push_back(e.replica->engine);
    }
  }
  for (auto& engine : engines) engine->Stop();
  for (auto& w : workers) {
    if (w.joinable()) w.join();
  }
}

std::vector<std::shared_ptr<const Replica>> ReplicaHost::replicas() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const Replica>> out;
  for (const auto& [id, e] : entries_) {
    if (e.state == "ready") out.push_back(e.replica);
  }
  return out;
}

std::vector<ReplicaView> ReplicaHost::Views() const {
  absl::MutexLock lock(&mu_);
  std::vector<ReplicaView> out;
  for (const auto& [id, e] : entries_) out.push_back(ViewLocked(e));
  return out;
}

std::shared_ptr<engine::Engine> ReplicaHost::FindEngine(const std::string& replica_id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(replica_id);
  if (it == entries_.end()) return nullptr;
  const std::string& state = it->second.state;
  return state == "ready" || state == "draining" ? it->second.replica->engine : nullptr;
}

const ServedModel* ReplicaHost::FindModel(const std::string& name,
                                          const std::string& version) const {
  for (const ServedModel* m : models()) {
    if (m->name == name && (version.empty() || m->version == version)) return m;
  }
  return nullptr;
}

std::vector<const ServedModel*> ReplicaHost::models() const {
  absl::MutexLock lock(&mu_);
  std::vector<const ServedModel*> out;
  for (const auto& m : models_) {
    const bool served = std::any_of(entries_.begin(), entries_.end(), [&](const auto& kv) {
      return kv.second.replica->model == m.get() && kv.second.state == "ready";
    });
    if (served) out.push_back(m.get());
  }
  return out;
}

void ReplicaHost::SetOnChange(std::function<void()> on_change) {
  absl::MutexLock lock(&on_change_mu_);
  on_change_ = std::move(on_change);
}

void ReplicaHost::NotifyChange() {
  serving_version_++;
  std::function<void()> f;
  {
    absl::MutexLock lock(&on_change_mu_);
    f = on_change_;
  }
  if (f) f();
}

std::pair<int64_t, int64_t> ReplicaHost::LedgerUsage(int device) const {
  absl::MutexLock lock(&mu_);
  return {ledger_.used(device), ledger_.capacity(device)};
}

}  // namespace exa::node
