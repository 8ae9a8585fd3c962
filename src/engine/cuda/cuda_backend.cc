#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "common/check.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/cuda/device_arena.h"
#include "kernels/add.h"
#include "kernels/convert.h"
#include "kernels/cuda_check.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/kv_store.h"
#include "kernels/paged_attention.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/silu_mul.h"
#include "nlohmann/json.hpp"

namespace exa::engine::cuda {
namespace {

// Partial results of split-K attention: enough for 64 decode sequences x 64 heads x 16 splits at
// head_dim 128; larger steps get fewer splits (kernels/paged_attention.h PlanPagedAttention).
constexpr int64_t kAttentionWorkspaceBytes = int64_t{32} << 20;
// Allocations carved from the pool (12 activations, KV, workspaces, 4 metadata regions), each
// rounded up to the pool's alignment.
constexpr int64_t kPoolSlackBytes = 32 * DeviceArena::kAlignment;

kernels::Dtype ToKernel(DType t) {
  switch (t) {
    case DType::kF32:
      return kernels::Dtype::kF32;
    case DType::kF16:
      return kernels::Dtype::kF16;
    case DType::kBF16:
      return kernels::Dtype::kBF16;
  }
  return kernels::Dtype::kF32;
}

int64_t MaxBlocksPerSequence(const CudaBackendOptions& o) {
  // +1: a sequence at the context limit may already hold the block of its next position.
  return (o.max_context + o.kv_block_size - 1) / o.kv_block_size + 1;
}

int64_t LayoutInts(const CudaBackendOptions& o) {
  return int64_t{5} * o.max_step_tokens + int64_t{o.max_sequences} * MaxBlocksPerSequence(o);
}

int64_t ActivationFloats(const ModelConfig& c, const CudaBackendOptions& o) {
  const int64_t t = o.max_step_tokens, s = o.max_sequences;
  return t * (4 * int64_t{c.hidden_size} + 2 * c.q_dim() + 2 * c.kv_dim() +
              2 * int64_t{c.intermediate_size}) +
         s * (2 * int64_t{c.hidden_size} + c.vocab_size);
}

int64_t HalfScratchBytes(const ModelConfig& c, const CudaBackendOptions& o) {
  const int64_t widest = std::max<int64_t>({c.hidden_size, c.q_dim(), c.intermediate_size});
  return int64_t{2} * o.max_step_tokens * widest;
}

}  // namespace

int32_t CudaKvBlocks(const ModelConfig& c, int64_t kv_cache_bytes, int32_t block_size,
                     int64_t element_bytes) {
  const int64_t per_block = int64_t{2} * c.num_layers * c.kv_dim() * element_bytes * block_size;
  if (per_block <= 0) return 0;
  return static_cast<int32_t>(
      std::min<int64_t>(kv_cache_bytes / per_block, std::numeric_limits<int32_t>::max()));
}

int64_t ReplicaPoolBytes(const ModelConfig& c, const CudaBackendOptions& o) {
  const int64_t element = static_cast<int64_t>(DTypeBytes(o.kv_dtype));
  const int64_t kv = int64_t{CudaKvBlocks(c, o.kv_cache_bytes, o.kv_block_size, element)} *
                     o.kv_block_size * 2 * c.num_layers * c.kv_dim() * element;
  // Layout, token ids, logit rows, RoPE frequencies, 4 sampling parameters and 1 chosen id per
  // sequence; and the combined step inputs of BeginStep (layout, ids, rows, sampling).
  const int64_t metadata =
      4 * (LayoutInts(o) + o.max_step_tokens + o.max_sequences + c.head_dim + 5 * o.max_sequences) +
      4 * (LayoutInts(o) + o.max_step_tokens + 5 * o.max_sequences);
  return kv + 4 * ActivationFloats(c, o) + kernels::kCublasWorkspaceBytes + HalfScratchBytes(c, o) +
         kAttentionWorkspaceBytes + metadata + kPoolSlackBytes;
}

CudaBackend::CudaBackend(const ModelConfig& config, const CudaBackendOptions& options)
    : config_(config), options_(options) {}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const ModelConfig& config, const CudaBackendOptions& options,
    std::shared_ptr<const DeviceWeights> weights, const ModelWeights& host_weights) {
  auto backend = std::unique_ptr<CudaBackend>(new CudaBackend(config, options));
  EXA_RETURN_IF_ERROR(backend->Init(std::move(weights), host_weights));
  return backend;
}

absl::Status CudaBackend::Init(std::shared_ptr<const DeviceWeights> weights,
                               const ModelWeights& host_weights) {
  const std::vector<const TensorView*> views = EnumerateTensors(host_weights);
  if (views.size() != weights->size()) {
    return absl::InternalError(StrCat("cuda backend: checkpoint has ", views.size(),
                                      " tensors, the device copy ", weights->size()));
  }
  for (size_t i = 0; i < views.size(); ++i) weight_index_.emplace(views[i]->data, i);
  weights_ = std::move(weights);

  EXA_CUDA_CHECK(cudaSetDevice(options_.device));
  EXA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (const char* env = std::getenv("EXA_CUDA_PROFILE_OPS"); env != nullptr && env[0] == '1') {
    profile_ = std::make_unique<OpProfile>();
    profile_->events.resize(1024);
    profile_->names.resize(1024);
    for (cudaEvent_t& e : profile_->events) EXA_CUDA_CHECK(cudaEventCreate(&e));
  }
  pool_bytes_ = ReplicaPoolBytes(config_, options_);
  size_t free_bytes = 0, total_bytes = 0;
  EXA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (static_cast<int64_t>(free_bytes) < pool_bytes_) {
    return absl::FailedPreconditionError(StrCat(
        "GPU ", options_.device, ": the replica needs a pool of ", pool_bytes_, " bytes (KV cache ",
        options_.kv_cache_bytes, " + activations and workspaces) but only ", free_bytes, " of ",
        total_bytes, " bytes are free"));
  }
  EXA_CUDA_CHECK(cudaMalloc(&pool_, static_cast<size_t>(pool_bytes_)));

  EXA_ASSIGN_OR_RETURN(void* cublas_workspace,
                       Take(kernels::kCublasWorkspaceBytes, "cuBLAS workspace"));
  EXA_ASSIGN_OR_RETURN(cublas_, kernels::CublasHandle::Create(stream_, cublas_workspace,
                                                              kernels::kCublasWorkspaceBytes));
  half_scratch_bytes_ = HalfScratchBytes(config_, options_);
  EXA_ASSIGN_OR_RETURN(half_scratch_, Take(half_scratch_bytes_, "GEMM input scratch"));
  attention_workspace_floats_ = kAttentionWorkspaceBytes / 4;
  EXA_ASSIGN_OR_RETURN(void* ws, Take(kAttentionWorkspaceBytes, "attention workspace"));
  attention_workspace_ = static_cast<float*>(ws);

  EXA_RETURN_IF_ERROR(MakeUpload(
      &step_upload_,
      LayoutInts(options_) + options_.max_step_tokens + int64_t{5} * options_.max_sequences,
      "step inputs"));
  EXA_RETURN_IF_ERROR(MakeUpload(&layout_upload_, LayoutInts(options_), "step layout"));
  EXA_RETURN_IF_ERROR(MakeUpload(&ids_upload_, options_.max_step_tokens, "token ids"));
  EXA_RETURN_IF_ERROR(MakeUpload(&rows_upload_, options_.max_sequences, "logit rows"));
  EXA_RETURN_IF_ERROR(MakeUpload(&inv_freq_upload_, config_.head_dim, "RoPE frequencies"));
  EXA_RETURN_IF_ERROR(
      MakeUpload(&sampling_upload_, int64_t{4} * options_.max_sequences, "sampling parameters"));
  EXA_ASSIGN_OR_RETURN(void* sampled, Take(int64_t{4} * options_.max_sequences, "sampled ids"));
  sampled_device_ = static_cast<int32_t*>(sampled);
  void* sampled_host = nullptr;
  EXA_CUDA_CHECK(cudaHostAlloc(&sampled_host, static_cast<size_t>(options_.max_sequences) * 4,
                               cudaHostAllocDefault));
  sampled_host_ = static_cast<int32_t*>(sampled_host);
  logits_host_floats_ = int64_t{options_.max_sequences} * config_.vocab_size;
  void* logits = nullptr;
  EXA_CUDA_CHECK(
      cudaHostAlloc(&logits, static_cast<size_t>(logits_host_floats_) * 4, cudaHostAllocDefault));
  logits_host_ = static_cast<float*>(logits);
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) {
    cudaSetDevice(options_.device);
    cudaStreamSynchronize(stream_);
  }
  cublas_.reset();  // before the pool that holds its workspace
  for (Upload* u : {&step_upload_, &layout_upload_, &ids_upload_, &rows_upload_, &inv_freq_upload_,
                    &sampling_upload_}) {
    if (u->done != nullptr) cudaEventDestroy(u->done);
    if (u->host != nullptr) cudaFreeHost(u->host);
  }
  if (logits_host_ != nullptr) cudaFreeHost(logits_host_);
  if (sampled_host_ != nullptr) cudaFreeHost(sampled_host_);
  if (pool_ != nullptr) cudaFree(pool_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<void*> CudaBackend::Take(int64_t bytes, const char* what) {
  DeviceArena arena(reinterpret_cast<uintptr_t>(pool_), pool_bytes_);
  EXA_RETURN_IF_ERROR(arena.Take(pool_used_, "earlier buffers").status());
  EXA_ASSIGN_OR_RETURN(uintptr_t at, arena.Take(bytes, what));
  pool_used_ = arena.used_bytes();
  return reinterpret_cast<void*>(at);
}

absl::Status CudaBackend::MakeUpload(Upload* u, int64_t elements, const char* what) {
  EXA_ASSIGN_OR_RETURN(void* device, Take(elements * 4, what));
  u->device = static_cast<int32_t*>(device);
  void* host = nullptr;
  EXA_CUDA_CHECK(cudaHostAlloc(&host, static_cast<size_t>(elements) * 4, cudaHostAllocDefault));
  u->host = static_cast<int32_t*>(host);
  u->capacity = elements;
  EXA_CUDA_CHECK(cudaEventCreateWithFlags(&u->done, cudaEventDisableTiming));
  EXA_CUDA_CHECK(cudaEventRecord(u->done, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Send(Upload& u, int64_t n, const std::function<void(int32_t*)>& fill) {
  if (n > u.capacity) {
    return absl::InternalError(
        StrCat("cuda backend: step metadata of ", n, " values exceeds its region of ", u.capacity));
  }
  // The previous copy out of the pinned buffer must be over before it is rewritten.
  EXA_CUDA_CHECK(cudaEventSynchronize(u.done));
  fill(u.host);
  EXA_CUDA_CHECK(cudaMemcpyAsync(u.device, u.host, static_cast<size_t>(n) * 4,
                                 cudaMemcpyHostToDevice, stream_));
  EXA_CUDA_CHECK(cudaEventRecord(u.done, stream_));
  return absl::OkStatus();
}

absl::StatusOr<Weight> CudaBackend::UploadWeight(const TensorView& tensor) {
  auto it = weight_index_.find(tensor.data);
  if (it == weight_index_.end()) {
    return absl::InternalError(
        "cuda backend: a tensor outside the model's checkpoint was uploaded");
  }
  return weights_->tensor(it->second);
}

absl::StatusOr<Buffer> CudaBackend::Allocate(int64_t rows, int64_t cols) {
  EXA_ASSIGN_OR_RETURN(void* at, Take(rows * cols * 4, "activations"));
  return Buffer{static_cast<float*>(at), rows, cols};
}

absl::Status CudaBackend::AllocateKvCache(const KvCacheShape& shape) {
  kv_shape_ = shape;
  const int64_t bytes = int64_t{2} * shape.num_layers * shape.num_blocks * shape.block_size *
                        shape.kv_dim * static_cast<int64_t>(DTypeBytes(options_.kv_dtype));
  EXA_ASSIGN_OR_RETURN(kv_, Take(bytes, "KV cache"));
  return absl::OkStatus();
}

void CudaBackend::Embedding(const Weight& table, std::span<const int32_t> ids, Buffer out) {
  if (!status_.ok()) return;
  // The first op of every step: the engine thread may not have this device current yet.
  auto set_device = [&]() -> absl::Status {
    EXA_CUDA_CHECK(cudaSetDevice(options_.device));
    return absl::OkStatus();
  };
  Record(set_device());
  const int64_t n = static_cast<int64_t>(ids.size());
  if (profile_ != nullptr) {  // the step's start; its ops are filed under its token count
    profile_->step = n == 1 ? "[1 token] " : n <= 64 ? "[2-64 tokens] " : "[65+ tokens] ";
    Mark("");
  }
  const int32_t* ids_device = prepared_.ids;
  if (ids_device == nullptr || prepared_.ids_count != n) {  // no BeginStep for this step
    Record(Send(ids_upload_, n, [&](int32_t* h) { std::copy(ids.begin(), ids.end(), h); }));
    ids_device = ids_upload_.device;
  }
  prepared_.ids = nullptr;
  kernels::EmbeddingParams p;
  p.table = table.data;
  p.table_dtype = ToKernel(table.dtype);
  p.table_rows = table.rows;
  p.cols = table.cols;
  p.table_stride = table.cols;
  p.ids = ids_device;
  p.out = out.data;
  p.out_stride = out.cols;
  p.count = n;
  if (status_.ok()) Record(kernels::LaunchEmbedding(p, stream_));
  Mark("embedding");
}

void CudaBackend::RmsNorm(Buffer x, const Weight& weight, float eps, Buffer out) {
  if (!status_.ok()) return;
  kernels::RmsNormParams p;
  p.x = x.data;
  p.weight = weight.data;
  p.weight_dtype = ToKernel(weight.dtype);
  p.out = out.data;
  p.rows = x.rows;
  p.cols = x.cols;
  p.x_stride = x.cols;
  p.out_stride = out.cols;
  p.eps = eps;
  Record(kernels::LaunchRmsNorm(p, stream_));
  Mark("rms_norm");
}

void CudaBackend::MatMul(Buffer x, const Weight& w, const Weight* bias, Buffer out) {
  const MatMulTarget target{&w, bias, out};
  MatMulShared(x, std::span<const MatMulTarget>(&target, 1));
}

void CudaBackend::MatMulShared(Buffer x, std::span<const MatMulTarget> targets) {
  if (!status_.ok()) return;
  Record(RunMatMul(x, targets));
  if (profile_ != nullptr) {
    std::string name = StrCat(x.rows <= kernels::kGemvMaxRows ? "gemv" : "gemm", " n=");
    for (size_t i = 0; i < targets.size(); ++i) StrAppend(&name, i ? "+" : "", targets[i].w->rows);
    StrAppend(&name, " k=", x.cols);
    Mark(name);
  }
}

void CudaBackend::MatMulAdd(Buffer x, const Weight& w, Buffer scratch, Buffer accum) {
  if (!status_.ok()) return;
  if (x.rows <= kernels::kGemvMaxRows && w.cols == x.cols && accum.cols == w.rows &&
      accum.rows == x.rows) {
    // The residual add folded into the GEMV's store: one launch instead of two.
    kernels::GemvParams v;
    v.targets[0] = {w.data, accum.data, w.rows, accum.cols};
    v.w_dtype = ToKernel(w.dtype);
    v.x = x.data;
    v.rows = x.rows;
    v.k = x.cols;
    v.x_stride = x.cols;
    v.accumulate = true;
    if (v.Validate().ok()) {
      Record(kernels::LaunchGemv(v, stream_));
      if (profile_ != nullptr) Mark(StrCat("gemv+add n=", w.rows, " k=", x.cols));
      return;
    }
  }
  Backend::MatMulAdd(x, w, scratch, accum);
}

absl::Status CudaBackend::RunMatMul(Buffer x, std::span<const MatMulTarget> targets) {
  // Decode-sized batches against half weights: the bandwidth-bound GEMV on fp32 x, every target
  // in one launch.
  if (x.rows <= kernels::kGemvMaxRows &&
      static_cast<int64_t>(targets.size()) <= kernels::kGemvMaxTargets) {
    kernels::GemvParams v;
    v.num_targets = static_cast<int32_t>(targets.size());
    v.w_dtype = ToKernel(targets[0].w->dtype);
    v.x = x.data;
    v.rows = x.rows;
    v.k = x.cols;
    v.x_stride = x.cols;
    bool same_shape = true;
    for (size_t i = 0; i < targets.size(); ++i) {
      const MatMulTarget& t = targets[i];
      same_shape = same_shape && t.w->dtype == targets[0].w->dtype && t.w->cols == x.cols &&
                   t.out.cols == t.w->rows && t.out.rows == x.rows;
      v.targets[i] = {t.w->data, t.out.data, t.w->rows, t.out.cols};
    }
    if (same_shape && v.Validate().ok()) {
      EXA_RETURN_IF_ERROR(kernels::LaunchGemv(v, stream_));
      for (const MatMulTarget& t : targets) EXA_RETURN_IF_ERROR(AddBias(t));
      return absl::OkStatus();
    }
  }
  DType narrowed = DType::kF32;  // the type half_scratch_ holds x in; f32: not yet narrowed
  for (const MatMulTarget& t : targets) {
    EXA_CHECK(x.cols == t.w->cols && t.out.cols == t.w->rows && t.out.rows == x.rows)
        << "matmul shapes x[" << x.rows << "," << x.cols << "] w[" << t.w->rows << "," << t.w->cols
        << "] out[" << t.out.rows << "," << t.out.cols << "]";
    const void* input = x.data;
    if (t.w->dtype != DType::kF32) {
      if (narrowed != t.w->dtype) {
        if (x.rows * x.cols * 2 > half_scratch_bytes_) {
          return absl::InternalError(StrCat("cuda backend: GEMM input [", x.rows, ", ", x.cols,
                                            "] exceeds the scratch of ", half_scratch_bytes_,
                                            " bytes"));
        }
        kernels::ConvertParams c;
        c.x = x.data;
        c.out = half_scratch_;
        c.out_dtype = ToKernel(t.w->dtype);
        c.rows = x.rows;
        c.cols = x.cols;
        c.x_stride = x.cols;
        EXA_RETURN_IF_ERROR(kernels::LaunchConvert(c, stream_));
        narrowed = t.w->dtype;
      }
      input = half_scratch_;
    }
    kernels::GemmParams g;
    g.w = t.w->data;
    g.x = input;
    g.out = t.out.data;
    g.dtype = ToKernel(t.w->dtype);
    g.rows = x.rows;
    g.n = t.w->rows;
    g.k = t.w->cols;
    g.x_stride = x.cols;
    g.out_stride = t.out.cols;
    EXA_RETURN_IF_ERROR(kernels::Gemm(*cublas_, g));
    EXA_RETURN_IF_ERROR(AddBias(t));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::AddBias(const MatMulTarget& t) {
  if (t.bias == nullptr || !t.bias->present()) return absl::OkStatus();
  kernels::AddParams a;
  a.x = t.out.data;
  a.bias = t.bias->data;
  a.bias_dtype = ToKernel(t.bias->dtype);
  a.rows = t.out.rows;
  a.cols = t.out.cols;
  a.x_stride = t.out.cols;
  return kernels::LaunchAdd(a, stream_);
}

absl::Status CudaBackend::EnsureInvFreq(std::span<const float> inv_freq) {
  if (std::equal(inv_freq.begin(), inv_freq.end(), uploaded_inv_freq_.begin(),
                 uploaded_inv_freq_.end())) {
    return absl::OkStatus();
  }
  EXA_RETURN_IF_ERROR(
      Send(inv_freq_upload_, static_cast<int64_t>(inv_freq.size()),
           [&](int32_t* h) { std::memcpy(h, inv_freq.data(), inv_freq.size() * sizeof(float)); }));
  uploaded_inv_freq_.assign(inv_freq.begin(), inv_freq.end());
  return absl::OkStatus();
}

int64_t CudaBackend::LayoutTotal(const BatchLayout& l) {
  const int64_t n = static_cast<int64_t>(l.positions.size());
  size_t widest = 1;
  for (const auto& table : l.block_tables) widest = std::max(widest, table.size());
  block_table_stride_ = static_cast<int32_t>(widest);
  max_context_ = 0;
  for (int32_t p : l.positions) max_context_ = std::max(max_context_, p + 1);
  return 5 * n + static_cast<int64_t>(l.block_tables.size()) * block_table_stride_;
}

void CudaBackend::FillLayout(const BatchLayout& l, int32_t* h) {
  const int64_t n = static_cast<int64_t>(l.positions.size());
  const int32_t group = config_.num_heads / config_.num_kv_heads;
  std::copy(l.positions.begin(), l.positions.end(), h);
  std::copy(l.slots.begin(), l.slots.end(), h + n);
  std::copy(l.token_seq.begin(), l.token_seq.end(), h + 2 * n);
  // Query tiles: runs of consecutive positions of one sequence, at most tile_tokens long.
  tiles_ = kernels::BuildAttentionTiles(l.positions, l.token_seq, group, h + 3 * n, h + 4 * n);
  int32_t* tables = h + 5 * n;
  for (size_t s = 0; s < l.block_tables.size(); ++s) {
    int32_t* row = tables + s * block_table_stride_;
    std::fill(row, row + block_table_stride_, 0);
    std::copy(l.block_tables[s].begin(), l.block_tables[s].end(), row);
  }
}

absl::Status CudaBackend::EnsureLayout(const BatchLayout& l) {
  if (layout_valid_ && l.positions == uploaded_layout_.positions &&
      l.slots == uploaded_layout_.slots && l.token_seq == uploaded_layout_.token_seq &&
      l.block_tables == uploaded_layout_.block_tables) {
    return absl::OkStatus();
  }
  layout_valid_ = false;
  const int64_t total = LayoutTotal(l);
  EXA_RETURN_IF_ERROR(Send(layout_upload_, total, [&](int32_t* h) { FillLayout(l, h); }));
  layout_device_ = layout_upload_.device;
  uploaded_layout_ = l;
  layout_valid_ = true;
  return absl::OkStatus();
}

void CudaBackend::BeginStep(std::span<const int32_t> tokens, const BatchLayout& layout,
                            std::span<const int32_t> logit_rows,
                            std::span<const DeviceSampling> sampling) {
  if (!status_.ok()) return;
  Record(PrepareStep(tokens, layout, logit_rows, sampling));
}

absl::Status CudaBackend::PrepareStep(std::span<const int32_t> tokens, const BatchLayout& layout,
                                      std::span<const int32_t> logit_rows,
                                      std::span<const DeviceSampling> sampling) {
  EXA_CUDA_CHECK(cudaSetDevice(options_.device));
  prepared_ = {};
  layout_valid_ = false;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  const int64_t stride = options_.max_sequences;
  if (rows > stride || static_cast<int64_t>(sampling.size()) > stride) {
    return absl::InternalError(
        StrCat("cuda backend: a step of ", rows, " logit rows exceeds ", stride, " sequences"));
  }
  // [layout | ids | logit rows | temperature | top_k | top_p | uniform], one copy.
  const int64_t layout_ints = LayoutTotal(layout);
  const int64_t total = layout_ints + n + rows + (sampling.empty() ? 0 : 4 * stride);
  EXA_RETURN_IF_ERROR(Send(step_upload_, total, [&](int32_t* h) {
    FillLayout(layout, h);
    std::copy(tokens.begin(), tokens.end(), h + layout_ints);
    std::copy(logit_rows.begin(), logit_rows.end(), h + layout_ints + n);
    if (!sampling.empty()) FillSampling(sampling, h + layout_ints + n + rows);
  }));
  const int32_t* d = step_upload_.device;
  layout_device_ = d;
  uploaded_layout_ = layout;
  layout_valid_ = true;
  prepared_.ids = d + layout_ints;
  prepared_.ids_count = n;
  prepared_.rows = d + layout_ints + n;
  prepared_.rows_count = rows;
  if (!sampling.empty()) {
    prepared_.sampling = d + layout_ints + n + rows;
    prepared_.sampling_count = static_cast<int64_t>(sampling.size());
  }
  return absl::OkStatus();
}

void CudaBackend::FillSampling(std::span<const DeviceSampling> rows, int32_t* h) const {
  const int64_t stride = options_.max_sequences;
  auto* temperature = reinterpret_cast<float*>(h);
  int32_t* top_k = h + stride;
  auto* top_p = reinterpret_cast<float*>(h + 2 * stride);
  auto* uniform = reinterpret_cast<float*>(h + 3 * stride);
  for (size_t i = 0; i < rows.size(); ++i) {
    temperature[i] = rows[i].temperature;
    top_k[i] = rows[i].top_k;
    top_p[i] = rows[i].top_p;
    uniform[i] = rows[i].uniform;
  }
}

void CudaBackend::Rope(Buffer q, Buffer k, int32_t head_dim, std::span<const float> inv_freq,
                       const BatchLayout& layout) {
  if (!status_.ok()) return;
  Record(EnsureLayout(layout));
  Record(EnsureInvFreq(inv_freq));
  if (!status_.ok()) return;
  kernels::RopeParams p;
  p.q = q.data;
  p.k = k.data;
  p.positions = layout_device_;
  p.inv_freq = reinterpret_cast<const float*>(inv_freq_upload_.device);
  p.tokens = q.rows;
  p.q_heads = static_cast<int32_t>(q.cols / head_dim);
  p.k_heads = static_cast<int32_t>(k.cols / head_dim);
  p.head_dim = head_dim;
  p.q_stride = q.cols;
  p.k_stride = k.cols;
  Record(kernels::LaunchRope(p, stream_));
  Mark("rope (+ step layout upload)");
}

void CudaBackend::StoreKv(int32_t layer, Buffer k, Buffer v, const BatchLayout& layout) {
  if (!status_.ok()) return;
  Record(EnsureLayout(layout));
  if (!status_.ok()) return;
  const int64_t n = static_cast<int64_t>(layout.positions.size());
  const int64_t slots = int64_t{kv_shape_.num_blocks} * kv_shape_.block_size;
  const int64_t half_bytes =
      slots * kv_shape_.kv_dim * static_cast<int64_t>(DTypeBytes(options_.kv_dtype));
  auto* base = static_cast<uint8_t*>(kv_) + 2 * layer * half_bytes;
  kernels::KvStoreParams p;
  p.k = k.data;
  p.v = v.data;
  p.k_cache = base;
  p.v_cache = base + half_bytes;
  p.slots = layout_device_ + n;
  p.cache_dtype = ToKernel(options_.kv_dtype);
  p.tokens = k.rows;
  p.kv_dim = kv_shape_.kv_dim;
  p.num_slots = slots;
  p.k_stride = k.cols;
  p.v_stride = v.cols;
  Record(kernels::LaunchKvStore(p, stream_));
  Mark("kv_store");
}

void CudaBackend::Attention(int32_t layer, Buffer q, const AttentionParams& params,
                            const BatchLayout& layout, Buffer out) {
  if (!status_.ok()) return;
  Record(EnsureLayout(layout));
  if (!status_.ok()) return;
  const int32_t n = static_cast<int32_t>(layout.positions.size());
  const int64_t slots = int64_t{kv_shape_.num_blocks} * kv_shape_.block_size;
  const int64_t half_bytes =
      slots * kv_shape_.kv_dim * static_cast<int64_t>(DTypeBytes(options_.kv_dtype));
  const auto* base = static_cast<const uint8_t*>(kv_) + 2 * layer * half_bytes;
  kernels::PagedAttentionParams p;
  p.q = q.data;
  p.out = out.data;
  p.k_cache = base;
  p.v_cache = base + half_bytes;
  p.cache_dtype = ToKernel(options_.kv_dtype);
  p.positions = layout_device_;
  p.token_seq = layout_device_ + 2 * n;
  p.tile_first = layout_device_ + 3 * n;
  p.tile_count = layout_device_ + 4 * n;
  p.block_tables = layout_device_ + 5 * n;
  p.workspace = attention_workspace_;
  p.workspace_floats = attention_workspace_floats_;
  p.tokens = n;
  p.tiles = tiles_;
  p.num_heads = params.num_heads;
  p.num_kv_heads = params.num_kv_heads;
  p.head_dim = params.head_dim;
  p.block_size = params.block_size;
  p.block_table_stride = block_table_stride_;
  p.num_slots = slots;
  p.q_stride = q.cols;
  p.out_stride = out.cols;
  p.scale = params.scale;
  p.window = params.window;
  p.softcap = params.softcap;
  p.plan = kernels::PlanPagedAttention(tiles_, n, params.num_heads, params.num_kv_heads,
                                       params.head_dim, max_context_, attention_workspace_floats_);
  Record(kernels::LaunchPagedAttention(p, stream_));
  Mark("paged_attention");
}

void CudaBackend::GatedMul(Buffer gate, Buffer up, Buffer out, bool gelu_tanh) {
  if (!status_.ok()) return;
  kernels::SiluMulParams p;
  p.gate = gate.data;
  p.up = up.data;
  p.out = out.data;
  p.rows = gate.rows;
  p.cols = gate.cols;
  p.stride = gate.cols;
  p.gelu_tanh = gelu_tanh;
  Record(kernels::LaunchSiluMul(p, stream_));
  Mark(gelu_tanh ? "gelu_tanh_mul" : "silu_mul");
}

void CudaBackend::SiluMul(Buffer gate, Buffer up, Buffer out) { GatedMul(gate, up, out, false); }

void CudaBackend::GeluTanhMul(Buffer gate, Buffer up, Buffer out) { GatedMul(gate, up, out, true); }

void CudaBackend::Scale(Buffer x, float s) { ScaleCap(x, s, 0); }

void CudaBackend::SoftCap(Buffer x, float cap) { ScaleCap(x, 1, cap); }

void CudaBackend::ScaleCap(Buffer x, float s, float softcap) {
  if (!status_.ok()) return;
  kernels::ScaleParams p;
  p.x = x.data;
  p.scale = s;
  p.softcap = softcap;
  p.rows = x.rows;
  p.cols = x.cols;
  p.stride = x.cols;
  Record(kernels::LaunchScale(p, stream_));
  Mark("scale");
}

void CudaBackend::Add(Buffer x, Buffer y) {
  if (!status_.ok()) return;
  kernels::AddParams p;
  p.x = x.data;
  p.y = y.data;
  p.rows = x.rows;
  p.cols = x.cols;
  p.x_stride = x.cols;
  p.y_stride = y.cols;
  Record(kernels::LaunchAdd(p, stream_));
  Mark("add");
}

void CudaBackend::GatherRows(Buffer x, std::span<const int32_t> rows, Buffer out) {
  if (!status_.ok()) return;
  const int64_t n = static_cast<int64_t>(rows.size());
  const int32_t* rows_device = prepared_.rows;
  if (rows_device == nullptr || prepared_.rows_count != n) {
    Record(Send(rows_upload_, n, [&](int32_t* h) { std::copy(rows.begin(), rows.end(), h); }));
    rows_device = rows_upload_.device;
  }
  prepared_.rows = nullptr;
  if (!status_.ok()) return;
  kernels::EmbeddingParams p;
  p.table = x.data;
  p.table_dtype = kernels::Dtype::kF32;
  p.table_rows = x.rows;
  p.cols = x.cols;
  p.table_stride = x.cols;
  p.ids = rows_device;
  p.out = out.data;
  p.out_stride = out.cols;
  p.count = n;
  Record(kernels::LaunchEmbedding(p, stream_));
  Mark("gather_rows (+ rows upload)");
}

void CudaBackend::CopyToHost(Buffer x, float* host) {
  const int64_t floats = x.rows * x.cols;
  if (status_.ok()) {
    auto copy = [&]() -> absl::Status {
      if (floats > logits_host_floats_) {
        EXA_CUDA_CHECK(cudaMemcpyAsync(host, x.data, static_cast<size_t>(floats) * 4,
                                       cudaMemcpyDeviceToHost, stream_));
        EXA_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return absl::OkStatus();
      }
      EXA_CUDA_CHECK(cudaMemcpyAsync(logits_host_, x.data, static_cast<size_t>(floats) * 4,
                                     cudaMemcpyDeviceToHost, stream_));
      Mark("logits to host");
      EXA_RETURN_IF_ERROR(WaitForStream());
      std::memcpy(host, logits_host_, static_cast<size_t>(floats) * 4);
      return absl::OkStatus();
    };
    Record(copy());
  }
  if (!status_.ok()) std::fill(host, host + floats, 0.0f);
}

absl::Status CudaBackend::WaitForStream() {
  // Waits for the whole step: a kernel that faulted reports here.
  const auto start = std::chrono::steady_clock::now();
  const cudaError_t synced = cudaStreamSynchronize(stream_);
  device_wait_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXA_CUDA_CHECK(synced);
  if (profile_ != nullptr) profile_->Fold();
  return absl::OkStatus();
}

absl::Status CudaBackend::RunSampling(Buffer logits, std::span<const DeviceSampling> rows,
                                      int32_t* tokens) {
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n > options_.max_sequences || n != logits.rows) {
    return absl::InternalError(StrCat("cuda backend: ", n, " sampling rows for ", logits.rows,
                                      " logit rows (at most ", options_.max_sequences, ")"));
  }
  const int64_t stride = options_.max_sequences;
  const int32_t* d = prepared_.sampling;
  if (d == nullptr || prepared_.sampling_count != n) {
    EXA_RETURN_IF_ERROR(
        Send(sampling_upload_, 4 * stride, [&](int32_t* h) { FillSampling(rows, h); }));
    d = sampling_upload_.device;
  }
  prepared_.sampling = nullptr;
  kernels::SamplingParams p;
  p.logits = logits.data;
  p.tokens = sampled_device_;
  p.temperature = reinterpret_cast<const float*>(d);
  p.top_k = d + stride;
  p.top_p = reinterpret_cast<const float*>(d + 2 * stride);
  p.uniform = reinterpret_cast<const float*>(d + 3 * stride);
  p.rows = static_cast<int32_t>(n);
  p.vocab = static_cast<int32_t>(logits.cols);
  p.logits_stride = logits.cols;
  EXA_RETURN_IF_ERROR(kernels::LaunchSampling(p, stream_));
  EXA_CUDA_CHECK(cudaMemcpyAsync(sampled_host_, sampled_device_, static_cast<size_t>(n) * 4,
                                 cudaMemcpyDeviceToHost, stream_));
  Mark("sampling (+ parameters upload, ids to host)");
  EXA_RETURN_IF_ERROR(WaitForStream());
  std::copy(sampled_host_, sampled_host_ + n, tokens);
  return absl::OkStatus();
}

void CudaBackend::SampleRows(Buffer logits, std::span<const DeviceSampling> rows, int32_t* tokens) {
  if (status_.ok()) Record(RunSampling(logits, rows, tokens));
  if (!status_.ok()) std::fill(tokens, tokens + rows.size(), 0);
}

void CudaBackend::Mark(std::string_view op) {
  if (profile_ == nullptr || !status_.ok()) return;
  auto& prof = *profile_;
  if (prof.used == prof.events.size()) return;  // a step longer than the event pool: cut off
  if (cudaEventRecord(prof.events[prof.used], stream_) != cudaSuccess) return;
  prof.names[prof.used++] = StrCat(prof.step, op);
}

void CudaBackend::OpProfile::Fold() {
  for (size_t i = 1; i < used; ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, events[i - 1], events[i]) != cudaSuccess) continue;
    auto& [calls, total_ms] = totals[names[i]];
    ++calls;
    total_ms += ms;
  }
  used = 0;
}

CudaBackend::OpProfile::~OpProfile() {
  nlohmann::json ops = nlohmann::json::object();
  for (const auto& [name, t] : totals) {
    ops[name] = {{"calls", t.first}, {"ms", t.second}, {"us_per_call", 1e3 * t.second / t.first}};
  }
  std::fprintf(stderr, "%s\n", nlohmann::json{{"cuda_op_profile", ops}}.dump().c_str());
  for (cudaEvent_t e : events) cudaEventDestroy(e);
}

}  // namespace exa::engine::cuda
