// The CUDA implementation of Backend (engine/backend.h), one per replica, on one GPU:
//
// - Weights come from a DeviceWeights copy shared with the other replicas of the same model on
//   the same GPU; UploadWeight only maps a checkpoint tensor to its device copy.
// - Everything else the replica touches (activations, the paged KV cache, the cuBLAS workspace,
//   the attention workspace, the step's metadata) is carved at creation from one device pool
//   sized from the replica's budget; nothing is allocated in the step loop.
// - All work goes to the replica's own stream. Linear layers of up to 4 rows (decode at small
//   batch) run through kernels/gemv.h on the fp32 activations; larger ones through cuBLAS (bf16
//   or fp16 inputs, fp32 accumulation and output); the rest are kernels/ kernels. A sequence's
//   logits can therefore differ in the last bits with the size of the batch it ran in (as they
//   do with cuBLAS's per-shape algorithm choice), unlike the CPU backend's. The KV cache is stored
//   in the weights' half type (fp32 for fp32 checkpoints), halving its size against the CPU
//   backend's fp32 cache.
// - Ops cannot return errors (the Backend contract is asynchronous), so the first CUDA error is
//   kept (status()) and later ops are skipped; Model::Forward returns it after the step, and the
//   replica's requests fail with the CUDA error text.
//
// One replica runs on one GPU: tensor parallelism across an NVLink domain is not implemented
// (doing it well needs NCCL all-reduces fused into the layer; until then a model must fit one
// GPU's memory).
//
// Threading: as Backend (one driving thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/device_weights.h"
#include "engine/model_config.h"

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace exa::kernels {
class CublasHandle;
}

namespace exa::engine::cuda {

struct CudaBackendOptions {
  int device = 0;
  int32_t max_step_tokens = 512;  // ModelLimits::max_step_tokens
  int32_t max_sequences = 64;     // sequences in one step (the engine's max_running)
  int32_t max_context = 2048;     // positions per sequence
  int32_t kv_block_size = 16;
  int64_t kv_cache_bytes = 0;     // the KV share of the replica's budget
  DType kv_dtype = DType::kBF16;  // the weights' dtype: half caches for half checkpoints
};

// Device bytes a replica needs besides the shared weights: the pool CudaBackend::Create reserves.
int64_t ReplicaPoolBytes(const ModelConfig& config, const CudaBackendOptions& options);
// Blocks `kv_cache_bytes` buys when K and V are stored in `element_bytes`-byte elements.
int32_t CudaKvBlocks(const ModelConfig& config, int64_t kv_cache_bytes, int32_t block_size,
                     int64_t element_bytes);

class CudaBackend final : public Backend {
 public:
  // FAILED_PRECONDITION when there is no driver or device, or the device lacks the memory.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      const ModelConfig& config, const CudaBackendOptions& options,
      std::shared_ptr<const DeviceWeights> weights, const ModelWeights& host_weights);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  absl::Status status() const override { return status_; }
  int64_t pool_bytes() const { return pool_bytes_; }
  int64_t held_bytes() const override { return pool_bytes_; }  // its device pool
  double device_wait_seconds() const override { return device_wait_seconds_; }

  absl::StatusOr<Weight> UploadWeight(const TensorView& tensor) override;
  absl::StatusOr<Buffer> Allocate(int64_t rows, int64_t cols) override;
  absl::Status AllocateKvCache(const KvCacheShape& shape) override;

  void Embedding(const Weight& table, std::span<const int32_t> ids, Buffer out) override;
  void RmsNorm(Buffer x, const Weight& weight, float eps, Buffer out) override;
  void MatMul(Buffer x, const Weight& w, const Weight* bias, Buffer out) override;
  void MatMulShared(Buffer x, std::span<const MatMulTarget> targets) override;
  void Rope(Buffer q, Buffer k, int32_t head_dim, std::span<const float> inv_freq,
            const BatchLayout& layout) override;
  void StoreKv(int32_t layer, Buffer k, Buffer v, const BatchLayout& layout) override;
  void Attention(int32_t layer, Buffer q, const AttentionParams& params, const BatchLayout& layout,
                 Buffer out) override;
  void SiluMul(Buffer gate, Buffer up, Buffer out) override;
  void GeluTanhMul(Buffer gate, Buffer up, Buffer out) override;
  void Scale(Buffer x, float s) override;
  void SoftCap(Buffer x, float cap) override;
  void Add(Buffer x, Buffer y) override;
  void MatMulAdd(Buffer x, const Weight& w, Buffer scratch, Buffer accum) override;
  void BeginStep(std::span<const int32_t> tokens, const BatchLayout& layout,
                 std::span<const int32_t> logit_rows,
                 std::span<const DeviceSampling> sampling) override;
  void GatherRows(Buffer x, std::span<const int32_t> rows, Buffer out) override;
  void CopyToHost(Buffer x, float* host) override;
  bool can_sample_on_device() const override { return true; }
  void SampleRows(Buffer logits, std::span<const DeviceSampling> rows, int32_t* tokens) override;

 private:
  // A region of pinned host memory and its device twin, for per-step metadata uploads.
  struct Upload {
    int32_t* host = nullptr;
    int32_t* device = nullptr;
    int64_t capacity = 0;        // int32 elements
    cudaEvent_t done = nullptr;  // the last copy out of `host` finished
  };

  CudaBackend(const ModelConfig& config, const CudaBackendOptions& options);
  // x = softcap * tanh(x * s / softcap), or x * s when softcap is 0.
  void ScaleCap(Buffer x, float s, float softcap);
  // SiluMul, or GeluTanhMul with `gelu_tanh`.
  void GatedMul(Buffer gate, Buffer up, Buffer out, bool gelu_tanh);
  absl::Status Init(std::shared_ptr<const DeviceWeights> weights, const ModelWeights& host_weights);
  absl::StatusOr<void*> Take(int64_t bytes, const char* what);
  absl::Status MakeUpload(Upload* u, int64_t elements, const char* what);
  // Copies `n` int32 (already written by `fill` into the pinned buffer) to the device twin.
  absl::Status Send(Upload& u, int64_t n, const std::function<void(int32_t*)>& fill);
  absl::Status EnsureLayout(const BatchLayout& layout);
  // The layout's size in int32 (sets block_table_stride_ and max_context_), and its image.
  int64_t LayoutTotal(const BatchLayout& layout);
  void FillLayout(const BatchLayout& layout, int32_t* host);
  void FillSampling(std::span<const DeviceSampling> rows, int32_t* host) const;
  absl::Status PrepareStep(std::span<const int32_t> tokens, const BatchLayout& layout,
                           std::span<const int32_t> logit_rows,
                           std::span<const DeviceSampling> sampling);
  absl::Status EnsureInvFreq(std::span<const float> inv_freq);
  // EXA_CUDA_PROFILE_OPS=1 (a diagnostic): device time between consecutive ops, summed per op
  // name and printed as one JSON line on stderr when the backend is destroyed. Adds an event
  // per op; never on in production.
  struct OpProfile {
    std::vector<cudaEvent_t> events;
    std::vector<std::string> names;
    size_t used = 0;
    std::string step;  // the current step's size class, prefixed to its op names
    std::map<std::string, std::pair<int64_t, double>> totals;  // name -> (calls, ms)
    void Fold();  // after a stream sync: the step's intervals into totals
    ~OpProfile();
  };
  void Mark(std::string_view op);
  absl::Status RunMatMul(Buffer x, std::span<const MatMulTarget> targets);
  absl::Status AddBias(const MatMulTarget& t);
  absl::Status RunSampling(Buffer logits, std::span<const DeviceSampling> rows, int32_t* tokens);
  // Waits for the stream (the step's end); the time goes to device_wait_seconds_.
  absl::Status WaitForStream();
  // Keeps the first error; later ops are skipped.
  void Record(absl::Status s) {
    if (status_.ok() && !s.ok()) status_ = std::move(s);
  }

  ModelConfig config_;
  CudaBackendOptions options_;
  absl::Status status_;
  std::shared_ptr<const DeviceWeights> weights_;
  std::unordered_map<const void*, size_t> weight_index_;  // checkpoint pointer -> shared tensor
  cudaStream_t stream_ = nullptr;
  void* pool_ = nullptr;
  int64_t pool_bytes_ = 0;
  int64_t pool_used_ = 0;
  std::unique_ptr<kernels::CublasHandle> cublas_;
  void* half_scratch_ = nullptr;  // activations narrowed for cuBLAS
  int64_t half_scratch_bytes_ = 0;
  float* attention_workspace_ = nullptr;
  int64_t attention_workspace_floats_ = 0;
  float* logits_host_ = nullptr;  // pinned
  int64_t logits_host_floats_ = 0;
  KvCacheShape kv_shape_;
  void* kv_ = nullptr;

  // Step metadata: positions | slots | token_seq | tile_first | tile_count | block tables.
  Upload layout_upload_, ids_upload_, rows_upload_, inv_freq_upload_;
  // BeginStep's one copy of the step's inputs, and where each part landed (consumed once).
  Upload step_upload_;
  struct Prepared {
    const int32_t* ids = nullptr;
    int64_t ids_count = 0;
    const int32_t* rows = nullptr;
    int64_t rows_count = 0;
    const int32_t* sampling = nullptr;
    int64_t sampling_count = 0;
  } prepared_;
  const int32_t* layout_device_ = nullptr;  // the uploaded layout (step_upload_ or layout_upload_)
  // Per-row sampling parameters: temperature | top_k | top_p | uniform, max_sequences each.
  Upload sampling_upload_;
  int32_t* sampled_device_ = nullptr;  // [max_sequences] chosen ids
  int32_t* sampled_host_ = nullptr;    // pinned twin
  BatchLayout uploaded_layout_;        // what the device copy holds
  bool layout_valid_ = false;
  int32_t tiles_ = 0, block_table_stride_ = 0, max_context_ = 0;
  std::vector<float> uploaded_inv_freq_;
  double device_wait_seconds_ = 0;  // in cudaStreamSynchronize at the end of steps
  std::unique_ptr<OpProfile> profile_;
};

}  // namespace exa::engine::cuda
