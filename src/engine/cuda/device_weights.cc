#include "engine/cuda/device_weights.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/cuda/device_arena.h"
#include "kernels/cuda_check.h"

namespace exa::engine::cuda {
namespace {

// Two 32 MiB pinned buffers: large enough that each DMA runs at full PCIe speed, small enough to
// pin cheaply per load.
constexpr int64_t kStagingBytes = int64_t{32} << 20;

struct RegistryEntry {
  absl::Mutex load_mu;  // held while the first replica loads; later ones wait, then share
  std::weak_ptr<const DeviceWeights> weights ABSL_GUARDED_BY(load_mu);
};

absl::Mutex registry_mu;
std::map<std::pair<int, std::string>, std::shared_ptr<RegistryEntry>>& Registry() {
  static auto* registry = new std::map<std::pair<int, std::string>, std::shared_ptr<RegistryEntry>>;
  return *registry;
}

// Pinned staging buffers, the load stream and their events; freed on every path out.
struct Staging {
  void* host[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  cudaStream_t stream = nullptr;
  ~Staging() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (int i = 0; i < 2; ++i) {
      if (done[i] != nullptr) cudaEventDestroy(done[i]);
      if (host[i] != nullptr) cudaFreeHost(host[i]);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// Copies `bytes` from host `src` to device `dst` through the staging buffers.
absl::Status Stream(Staging& s, const uint8_t* src, uint8_t* dst, int64_t bytes, int* turn) {
  for (int64_t off = 0; off < bytes; off += kStagingBytes) {
    const int64_t n = std::min(kStagingBytes, bytes - off);
    const int i = *turn;
    *turn ^= 1;
    EXA_CUDA_CHECK(cudaEventSynchronize(s.done[i]));  // the DMA that last used buffer i is over
    std::memcpy(s.host[i], src + off, static_cast<size_t>(n));
    EXA_CUDA_CHECK(cudaMemcpyAsync(dst + off, s.host[i], static_cast<size_t>(n),
                                   cudaMemcpyHostToDevice, s.stream));
    EXA_CUDA_CHECK(cudaEventRecord(s.done[i], s.stream));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<const TensorView*> EnumerateTensors(const ModelWeights& w) { return w.Tensors(); }

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Load(int device,
                                                                   const ModelWeights& weights) {
  const absl::Time start = absl::Now();
  auto dw = std::unique_ptr<DeviceWeights>(new DeviceWeights());
  dw->device_ = device;
  const std::vector<const TensorView*> views = EnumerateTensors(weights);
  // Tied embeddings: the output head is the embedding table; copy it once.
  std::map<const void*, size_t> first_of;
  std::vector<int64_t> offsets(views.size());
  int64_t total = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    if (auto [it, fresh] = first_of.emplace(views[i]->data, i); !fresh) continue;
    offsets[i] = total;
    total += DeviceArena::AlignUp(static_cast<int64_t>(views[i]->bytes));
  }
  EXA_CUDA_CHECK(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  EXA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (static_cast<int64_t>(free_bytes) < total) {
    return absl::FailedPreconditionError(StrCat("GPU ", device, ": the weights need ", total,
                                                " bytes but only ", free_bytes, " of ", total_bytes,
                                                " are free"));
  }
  EXA_CUDA_CHECK(cudaMalloc(&dw->memory_, static_cast<size_t>(std::max<int64_t>(total, 1))));
  dw->bytes_ = total;
  Staging s;
  EXA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  for (int i = 0; i < 2; ++i) {
    EXA_CUDA_CHECK(cudaHostAlloc(&s.host[i], kStagingBytes, cudaHostAllocDefault));
    EXA_CUDA_CHECK(cudaEventCreateWithFlags(&s.done[i], cudaEventDisableTiming));
    EXA_CUDA_CHECK(cudaEventRecord(s.done[i], s.stream));
  }
  int turn = 0;
  auto* base = static_cast<uint8_t*>(dw->memory_);
  dw->tensors_.resize(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorView& t = *views[i];
    const size_t first = first_of[t.data];
    if (first == i) {
      EXA_RETURN_IF_ERROR(Stream(s, static_cast<const uint8_t*>(t.data), base + offsets[i],
                                 static_cast<int64_t>(t.bytes), &turn));
    }
    Weight& w = dw->tensors_[i];
    w.data = base + offsets[first];
    w.dtype = t.dtype;
    w.rows = t.shape.size() == 2 ? t.shape[0] : 1;
    w.cols = t.shape.empty() ? 1 : t.shape.back();
  }
  EXA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  dw->load_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
  return dw;
}

DeviceWeights::~DeviceWeights() {
  if (memory_ == nullptr) return;
  cudaSetDevice(device_);
  cudaFree(memory_);
}

absl::StatusOr<std::shared_ptr<const DeviceWeights>> DeviceWeights::Acquire(
    int device, const std::string& key, const ModelWeights& weights) {
  std::shared_ptr<RegistryEntry> entry;
  {
    absl::MutexLock lock(&registry_mu);
    auto& slot = Registry()[{device, key}];
    if (slot == nullptr) slot = std::make_shared<RegistryEntry>();
    entry = slot;
  }
  absl::MutexLock load_lock(&entry->load_mu);
  if (auto shared = entry->weights.lock()) {
    if (shared->size() != EnumerateTensors(weights).size()) {
      return absl::InternalError(StrCat("model ", key, " on GPU ", device,
                                        ": the shared weight copy has ", shared->size(),
                                        " tensors, this replica's checkpoint a different count"));
    }
    EXA_LOG_INFO("engine", "sharing device weights",
                 {{"model", key}, {"device", device}, {"bytes", shared->bytes()}});
    return shared;
  }
  EXA_ASSIGN_OR_RETURN(std::unique_ptr<DeviceWeights> loaded, Load(device, weights));
  std::shared_ptr<const DeviceWeights> shared(std::move(loaded));
  entry->weights = shared;
  EXA_LOG_INFO("engine", "loaded device weights",
               {{"model", key},
                {"device", device},
                {"bytes", shared->bytes()},
                {"seconds", shared->load_seconds()}});
  return shared;
}

}  // namespace exa::engine::cuda
