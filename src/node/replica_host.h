// The inference role's replicas, in-process (DESIGN.md §1): one Engine per replica, each on its
// own thread, grouped by model@version with one shared tokenizer. Until the scheduler drives
// StartReplica/StopReplica, replicas come from the node's config (`inference.models`).
//
// Thread safety: Start/Stop on the owning thread; the lookups from any thread after Start.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "config/schema.h"
#include "engine/engine.h"
#include "engine/tokenizer_detokenizer.h"

namespace exa::node {

struct InferenceOptions {
  // Model directories (Hugging Face layout), each optionally "@version" (default "v1").
  // Empty: the bundled model (models/exa-tiny-arith) when it can be found.
  std::vector<std::string> models;
  int replicas_per_model = 1;
  std::string backend = "cpu";  // cpu or sim
  int threads = 0;              // per replica; 0: one per hardware thread
  config::Bytes kv_cache_bytes{64 << 20};
  int max_batch_tokens = 512;
  int max_running = 64;
  int max_queue = 256;
  // sim backend only: every modeled step takes this many times longer (a slow-replica drill).
  double sim_slowdown = 1.0;
  // sim backend only, a drill: while this file exists every replica's step loop hangs.
  std::string sim_stall_file;
  // cuda backend: the GPUs (CUDA indices) replicas are spread over, round-robin in start order.
  // Empty: every GPU the node found (gpu_count, set by the daemon from its inventory). Decimal
  // strings (the config schema's list type), validated as 0-255.
  std::vector<std::string> gpus;
  int gpu_count = 0;  // not a config key
  // cuda backend: run the GEMM and copy burn-in on every GPU at start; a node that fails it is
  // tainted "burn-in-failed" and starts no replica.
  bool burn_in = true;
};

// The GPU of each of `replicas` replicas: `gpus` round-robin, or 0..gpu_count-1 when `gpus` is
// empty, or GPU 0 when there is neither (the replica then fails with the CUDA reason). Pure.
std::vector<int> AssignGpus(int replicas, const std::vector<int>& gpus, int gpu_count);

void RegisterConfig(config::Schema& schema, std::string_view section, InferenceOptions* options);

// A model@version served here: what the gateway needs to turn text into a request.
struct ServedModel {
  std::string name;     // directory name, e.g. "exa-tiny-arith"
  std::string version;  // e.g. "v1"
  std::string dir;
  std::shared_ptr<const engine::TokenizerDetokenizer> tokenizer;
  engine::EngineInfo info;
};

struct Replica {
  std::string id;  // "<node>/<model>@<version>#<n>"
  const ServedModel* model = nullptr;
  std::unique_ptr<engine::Engine> engine;
  int device = -1;  // cuda backend: the GPU; -1 otherwise
};

// A replica whose engine could not start (no GPU, too little device memory, a CUDA error): the
// node and its other replicas keep serving; this one is listed with state "failed" and why.
struct FailedReplica {
  std::string id;
  std::string model;
  std::string version;
  std::string backend;
  int device = -1;
  std::string error;
};

class ReplicaHost {
 public:
  ReplicaHost(std::string node_id, InferenceOptions options);
  ~ReplicaHost();

  // Loads every configured model and starts its replicas. A model whose directory or tokenizer
  // cannot be read fails the start with the directory and the reason (a configuration error); a
  // replica whose engine cannot start (no GPU, too little memory) fails alone: failed_replicas().
  absl::Status Start();
  void Stop();

  const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
  const std::vector<FailedReplica>& failed_replicas() const { return failed_; }
  engine::Engine* FindEngine(const std::string& replica_id) const;
  // nullptr when no such model (any version when `version` is empty).
  const ServedModel* FindModel(const std::string& name, const std::string& version) const;
  std::vector<const ServedModel*> models() const;

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
  absl::Status SaveLabelsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(labels_mu_);

  const std::string node_id_;
  const InferenceOptions options_;
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<FailedReplica> failed_;
  std::map<std::string, Replica*> by_id_;
  mutable absl::Mutex labels_mu_;
  std::map<std::string, Labels> labels_ ABSL_GUARDED_BY(labels_mu_);  // by replica id
  std::string labels_path_ ABSL_GUARDED_BY(labels_mu_);
  std::atomic<uint64_t> labels_version_{0};
};

// The model shipped in models/ (it adds numbers: the probe "1+1=" must answer "2").
inline constexpr char kBundledModelName[] = "exa-tiny-arith";

// Where the bundled model is: next to the binary (build tree or install prefix) or under the
// current directory. Empty when none is found.
std::string FindBundledModel();

}  // namespace exa::node
