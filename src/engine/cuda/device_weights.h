// DeviceWeights: one read-only copy of a model's weights in one GPU's memory, shared by every
// replica of that model@version on that GPU (reference-counted through shared_ptr; the registry
// holds only weak references, so the copy is freed with its last replica). Each replica keeps its
// own KV cache, activations and batch: the finer-grained memory reuse that lets more replicas
// than GPUs fit (docs/architecture.md#cold-start).
//
// Loading streams the memory-mapped checkpoint through two pinned staging buffers: the host
// copies (and so reads from the file) one chunk while the DMA engine moves the previous one.
//
// Thread safety: Acquire may be called from any thread; a second replica of the same model on
// the same device waits for the first one's load to finish and then shares it. A DeviceWeights
// is immutable after loading.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model_weights.h"

namespace exa::engine::cuda {

// Every tensor of `weights` in a fixed order (embedding, final norm, output head, then each
// layer's tensors); absent biases are skipped. Two replicas' enumerations line up index by index.
std::vector<const TensorView*> EnumerateTensors(const ModelWeights& weights);

class DeviceWeights {
 public:
  // The shared copy of the model `key` (its identity: directory and size, engine/cuda/
  // cuda_engine.cc) on `device`, loading it from `weights` if no replica holds it yet.
  static absl::StatusOr<std::shared_ptr<const DeviceWeights>> Acquire(int device,
                                                                      const std::string& key,
                                                                      const ModelWeights& weights);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Device weight `i` of EnumerateTensors() order.
  const Weight& tensor(size_t i) const { return tensors_[i]; }
  size_t size() const { return tensors_.size(); }
  int device() const { return device_; }
  int64_t bytes() const { return bytes_; }
  double load_seconds() const { return load_seconds_; }
  // Replicas currently sharing this copy (for logs and tests).
  static long SharedCount(const std::shared_ptr<const DeviceWeights>& w) { return w.use_count(); }

 private:
  DeviceWeights() = default;
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Load(int device,
                                                             const ModelWeights& weights);

  int device_ = 0;
  void* memory_ = nullptr;  // one cudaMalloc for every tensor
  int64_t bytes_ = 0;
  double load_seconds_ = 0;
  std::vector<Weight> tensors_;
};

}  // namespace exa::engine::cuda
