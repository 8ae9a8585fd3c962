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
};

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
};

class ReplicaHost {
 public:
  ReplicaHost(std::string node_id, InferenceOptions options);
  ~ReplicaHost();

  // Loads every configured model and starts its replicas. A model that fails to load fails the
  // start with the directory and the reason.
  absl::Status Start();
  void Stop();

  const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
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
