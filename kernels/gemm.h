// Linear layers through cuBLAS: out = x @ w^T with w [n, k] row-major in its stored dtype (bf16,
// fp16 or fp32), x [rows, k] in the same dtype (the backend narrows fp32 activations first,
// kernels/convert.h), out [rows, n] fp32. Half inputs multiply on tensor cores with fp32
// accumulation (CUBLAS_COMPUTE_32F); fp32 weights use plain fp32 (no TF32), so tiny reference
// models match the CPU backend closely.
//
// A CublasHandle is bound to one stream and one workspace for its life: the workspace comes from
// the replica's device pool, allocated once (cuBLAS would otherwise allocate its own on first
// use, inside the step loop).
//
// Thread safety: a handle is used by one thread at a time (the replica's engine thread).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"

typedef struct cublasContext* cublasHandle_t;

namespace exa::kernels {

class CublasHandle {
 public:
  // `workspace` stays owned by the caller and must outlive the handle; null leaves cuBLAS its
  // own (warm-up only: it allocates on first use).
  static absl::StatusOr<std::unique_ptr<CublasHandle>> Create(cudaStream_t stream, void* workspace,
                                                              int64_t workspace_bytes);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }

 private:
  explicit CublasHandle(cublasHandle_t handle) : handle_(handle) {}
  cublasHandle_t handle_;
};

// cuBLAS's recommended workspace for Hopper (32 MiB; 4 MiB suffices before sm_90).
inline constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;

struct GemmParams {
  const void* w = nullptr;  // [n, k] row-major in dtype, row stride k
  const void* x = nullptr;  // [rows, k] row-major in dtype, row stride x_stride
  float* out = nullptr;     // [rows, n] fp32, row stride out_stride
  Dtype dtype = Dtype::kBF16;
  int64_t rows = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t x_stride = 0;
  int64_t out_stride = 0;

  absl::Status Validate() const;
};

absl::Status Gemm(const CublasHandle& handle, const GemmParams& params);

}  // namespace exa::kernels
