// The inference role's replicas, in-process (docs/architecture.md#roles): one Engine per replica,
// each on its own thread, grouped by model@version with one shared tokenizer. Replicas come from
// the node's config (`inference.models`) at start and from StartReplica/StopReplica
// (exaserve.v1.Node, the scheduler's and the operator's hands) at any time. Each has a state —
// pending → loading → warming → ready → draining → stopped, or failed — with a reason and the time
// it entered it. A memory ledger per device (memory_ledger.h) refuses a replica whose budget does
// not fit before anything loads.
//
// The lifecycle is here; its neighbours live in their own files: the config section
// (inference_options.h), the bundled model (bundled_model.h), pre-staging models into the node
// cache (model_staging.cc) and replica labels with their file (replica_labels.cc).
//
// Thread safety: every method may be called from any thread after construction. Engines are
// shared: a caller holding one keeps it alive across a concurrent stop (its Submit then fails).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/tokenizer_detokenizer.h"
#include "node/bundled_model.h"
#include "node/inference_options.h"
#include "node/memory_ledger.h"

namespace exa::node {

// The GPU of each of `replicas` replicas: `gpus` round-robin, or 0..gpu_count-1 when `gpus` is
// empty, or GPU 0 when there is neither (the replica then fails with the CUDA reason). Pure.
std::vector<int> AssignGpus(int replicas, const std::vector<int>& gpus, int gpu_count);

// A model@version served here: what the gateway needs to turn text into a request.
struct ServedModel {
  std::string name;     // directory name, e.g. "exa-tiny-arith"
  std::string version;  // e.g. "v1"
  std::string dir;
  std::shared_ptr<const engine::TokenizerDetokenizer> tokenizer;
  engine::EngineInfo info;
};

// What StartReplica is asked for (exaserve.v1.StartReplicaRequest).
struct ReplicaSpec {
  std::string model_dir;  // a model directory on this node (HF layout); or, when empty:
  std::string model;      // a model name in the weights store, pulled into the node cache first
  std::string version = "v1";
  std::string replica_id;           // empty: "<node>/<model>@<version>#<n>", the first free n
  int64_t generation = 0;           // StartReplica is idempotent on (replica_id, generation)
  std::string backend;              // empty: the node's inference.backend
  int device = -1;                  // cuda: the GPU; -1: the one with the most free memory
  int64_t kv_cache_bytes = 0;       // 0: the node's inference.kv_cache_bytes
  int64_t memory_budget_bytes = 0;  // 0: estimated (weights + KV cache + runtime)
  std::map<std::string, std::string> labels;
};

struct Replica {
  std::string id;  // "<node>/<model>@<version>#<n>"
  const ServedModel* model = nullptr;
  std::shared_ptr<engine::Engine> engine;  // null until loaded, and after a failure
  int device = -1;                         // cuda backend: the GPU; -1 otherwise
  std::string backend;
  int64_t generation = 0;
  int64_t budget_bytes = 0;  // what the ledger holds for it (shared weights apart)
};

// A replica's state as ListReplicas shows it.
struct ReplicaView {
  std::string id, model, version, backend;
  int device = -1;
  int64_t generation = 0;
  int64_t budget_bytes = 0;
  std::string state;  // pending, loading, warming, ready, draining, stopped, failed
  std::string reason;
  absl::Time since;
  std::shared_ptr<engine::Engine> engine;  // set while loaded (warming, ready, draining)
};

class ReplicaHost {
 public:
  ReplicaHost(std::string node_id, InferenceOptions options);
  ~ReplicaHost();

  // Loads every configured model and starts its replicas, synchronously. A model whose
  // directory or tokenizer cannot be read fails the start with the directory and the reason (a
  // configuration error); a replica whose engine cannot start (no GPU, too little memory) fails
  // alone, listed with state "failed" and why.
  absl::Status Start();
  // Stops every replica at once (their requests end CANCELLED) and joins the loaders.
  void Stop();

  // Starts a replica in the background: returns its view at once (pending), then it loads,
  // warms up (one greedy token) and becomes ready, or fails with the reason. INVALID_ARGUMENT
  // for a bad spec (naming the field), FAILED_PRECONDITION when the ledger has no room (the
  // numbers in the message) or the id runs another generation; the same (id, generation) again
  // returns the replica's current view.
  absl::StatusOr<ReplicaView> StartReplica(const ReplicaSpec& spec);
  // Takes the replica out of the serving set at once, then (drain) lets its admitted requests
  // finish for at most `drain_timeout` (0: the node's default) or (immediate) cancels them, and
  // frees its memory. NOT_FOUND for an unknown id; a replica already stopping returns its view.
  absl::StatusOr<ReplicaView> StopReplica(const std::string& replica_id, bool drain,
                                          absl::Duration drain_timeout = absl::ZeroDuration());

  // The serving set: replicas that are ready.
  std::vector<std::shared_ptr<const Replica>> replicas() const;
  // Every replica the node knows, in any state (recent stopped and failed ones included).
  std::vector<ReplicaView> Views() const;
  // The engine of a loaded replica (ready, or draining with requests still running).
  std::shared_ptr<engine::Engine> FindEngine(const std::string& replica_id) const;
  // nullptr when no such model (any version when `version` is empty).
  const ServedModel* FindModel(const std::string& name, const std::string& version) const;
  // Models with at least one ready replica.
  std::vector<const ServedModel*> models() const;
  // A reason this node takes no new replica (a failed GPU burn-in); empty lifts it. StartReplica
  // is then refused with FAILED_PRECONDITION and the reason; running replicas keep running.
  void SetRefusal(std::string reason);
  // Called (from any thread, no lock held) whenever the serving set changes.
  void SetOnChange(std::function<void()> on_change);
  // Pulls NAME:VERSION into the node cache and returns its directory (the daemon's weights
  // fetcher: local → rack peer → origin, verified). Without one, StartReplica needs model_dir.
  using ModelFetch =
      std::function<absl::StatusOr<std::string>(const std::string&, const std::string&)>;
  void SetModelFetch(ModelFetch fetch);
  bool pulls_models() const;
  // Pre-staging (Node.StageModel): pulls MODEL@VERSION in the background once; the answer is
  // {"pulling" | "staged" | "failed", reason}. A failed one is pulled again by the first call
  // stage_retry_after (5 s) after the failure, so a scheduler asking every step does not hammer
  // the origin.
  // FAILED_PRECONDITION without a fetcher; RESOURCE_EXHAUSTED beyond kMaxStagePulls at once or
  // kMaxStagedModels tracked; INVALID_ARGUMENT for a bad name.
  static constexpr int kMaxStagePulls = 4;
  static constexpr size_t kMaxStagedModels = 256;
  absl::StatusOr<std::pair<std::string, std::string>> StageModel(const std::string& model,
                                                                 const std::string& version);
  // "model@version" of the models pulled and verified by this boot (StageModel or a start).
  std::vector<std::string> StagedModels() const;
  void set_stage_retry_after(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    stage_retry_after_ = d;
  }
  // Moves on every change of the serving set (a poller re-reads replicas() only then).
  uint64_t serving_version() const { return serving_version_.load(); }
  // Bytes promised on `device` (-1: host) and its capacity (0: not accounted).
  std::pair<int64_t, int64_t> LedgerUsage(int device) const;

  // Replica labels (version routing). The selector's "model" and "version" keys match the
  // served model, other keys the replica's labels; every key must match (empty: all). Returns
  // the matched replicas with their labels after the change, and saves them to the labels file.
  using Labels = std::map<std::string, std::string>;
  absl::StatusOr<std::vector<std::pair<std::string, Labels>>> Relabel(
      const Labels& selector, const Labels& set, const std::vector<std::string>& remove);
  Labels LabelsOf(const std::string& replica_id) const;
  // Moves on every change of any replica's labels (so readers re-read only then).
  uint64_t labels_version() const { return labels_version_.load(); }
  // Where labels persist (call before Start's replicas serve); loads what the file holds.
  absl::Status UseLabelsFile(std::string path);

 private:
  struct Entry {
    std::shared_ptr<Replica> replica;
    std::string state, reason;
    absl::Time since;
    std::string weights_holder;  // the ledger's shared-weights hold this replica counts on
    // What StartReplica named (its model_dir, or the store model's name) and the version: a
    // start under the same id must name the same to be the same replica.
    std::string source, version;
  };

  absl::Status SaveLabelsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(labels_mu_);
  // The ServedModel for dir@version, loading its tokenizer the first time. Its name is the
  // directory's, unless `name` is given (a model pulled into <cache>/NAME/VERSION).
  absl::StatusOr<ServedModel*> ModelFor(const std::string& dir, const std::string& version,
                                        const std::string& name = "");
  // Validates and reserves; on success the entry exists in state pending.
  absl::StatusOr<ReplicaView> Admit(const ReplicaSpec& spec, ServedModel* model);
  // The ledger's holds for replica `id` of `model` (weights once per model and device, then its
  // own budget); sets the entry's device and weights holder.
  absl::Status ReserveLocked(Entry& entry, const ReplicaSpec& spec, int64_t weights)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replica running under `spec.replica_id` (neither stopped nor failed): its view when it
  // is the same replica (StartReplica is idempotent); FAILED_PRECONDITION when it runs another
  // generation, ALREADY_EXISTS when another model, version or backend; nullopt when the id is
  // free or empty. `backend` is the spec's, resolved.
  std::optional<absl::StatusOr<ReplicaView>> ExistingLocked(const ReplicaSpec& spec,
                                                            const std::string& backend) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sets labels on `id` and persists them (a failed save is logged; they hold until restart).
  void AddLabels(const std::string& id, const Labels& labels);
  // The next free "<node>/<name>@<version>#<n>".
  std::string NextIdLocked(const std::string& name, const std::string& version) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // StartReplica by model name: pull, then admit against the ledger, then load (background).
  absl::StatusOr<ReplicaView> StartFromStore(const ReplicaSpec& spec);
  void PullAndLoad(std::string replica_id, ReplicaSpec spec);
  // pending → loading → warming → ready (or failed): the engine is created and warmed up.
  void Load(std::string replica_id, engine::EngineOptions options);
  void Drain(std::string replica_id, bool drain, absl::Duration timeout);
  void SetState(const std::string& id, std::string state, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ReplicaView ViewLocked(const Entry& e) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TrimHistoryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyChange();
  engine::EngineOptions EngineOptionsFor(const ServedModel& model, const std::string& backend,
                                         int device, int64_t kv_cache_bytes) const;

  const std::string node_id_;
  const InferenceOptions options_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<ServedModel>> models_ ABSL_GUARDED_BY(mu_);  // never shrinks
  // Name-only stand-ins for models still being pulled (never served; never shrinks).
  std::vector<std::unique_ptr<ServedModel>> placeholders_ ABSL_GUARDED_BY(mu_);
  ModelFetch fetch_ ABSL_GUARDED_BY(mu_);
  struct Staging {
    std::string state;  // pulling, staged, failed
    std::string reason;
    absl::Time failed_at;
  };
  absl::Duration stage_retry_after_ ABSL_GUARDED_BY(mu_) = absl::Seconds(5);
  std::map<std::string, Staging> staging_ ABSL_GUARDED_BY(mu_);  // "model@version"
  int stage_pulls_ ABSL_GUARDED_BY(mu_) = 0;
  std::string refusal_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by replica id
  std::vector<std::string> history_ ABSL_GUARDED_BY(mu_);      // stopped/failed ids, oldest first
  MemoryLedger ledger_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex on_change_mu_;
  std::function<void()> on_change_ ABSL_GUARDED_BY(on_change_mu_);
  mutable absl::Mutex labels_mu_;
  std::map<std::string, Labels> labels_ ABSL_GUARDED_BY(labels_mu_);  // by replica id
  std::string labels_path_ ABSL_GUARDED_BY(labels_mu_);
  std::atomic<uint64_t> labels_version_{0};
  std::atomic<uint64_t> serving_version_{0};
};

// Bytes a replica of the model in `dir` needs besides its KV cache: the checkpoint's tensors
// plus the runtime's activations and workspaces (an estimate: 5% of the weights + 64 MiB).
absl::StatusOr<int64_t> EstimateWeightBytes(const std::string& dir);

}  // namespace exa::node
