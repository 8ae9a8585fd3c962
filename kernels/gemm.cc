#include "kernels/gemm.h"

#include <cublas_v2.h>

#include <limits>

#include "kernels/cuda_check.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

cudaDataType_t CudaType(Dtype t) {
  switch (t) {
    case Dtype::kF32:
      return CUDA_R_32F;
    case Dtype::kF16:
      return CUDA_R_16F;
    case Dtype::kBF16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CublasHandle>> CublasHandle::Create(cudaStream_t stream,
                                                                   void* workspace,
                                                                   int64_t workspace_bytes) {
  cublasHandle_t h = nullptr;
  EXA_CUBLAS_CHECK(cublasCreate(&h));
  auto handle = std::unique_ptr<CublasHandle>(new CublasHandle(h));
  EXA_CUBLAS_CHECK(cublasSetStream(h, stream));
  if (workspace != nullptr) {
    EXA_CUBLAS_CHECK(cublasSetWorkspace(h, workspace, static_cast<size_t>(workspace_bytes)));
  }
  // Results must not depend on which stream ran first; atomics would make them vary run to run.
  EXA_CUBLAS_CHECK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  EXA_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  return handle;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

absl::Status GemmParams::Validate() const {
  constexpr const char* kOp = "gemm";
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  EXA_KERNEL_REQUIRE_PTR(w, kOp);
  EXA_KERNEL_REQUIRE_PTR(x, kOp);
  EXA_KERNEL_REQUIRE_PTR(out, kOp);
  EXA_KERNEL_REQUIRE(rows >= 1 && rows <= kMax, kOp, "rows", rows, "must be in [1, 2^31)");
  EXA_KERNEL_REQUIRE(n >= 1 && n <= kMax, kOp, "n", n, "must be in [1, 2^31)");
  EXA_KERNEL_REQUIRE(k >= 1 && k <= kMax, kOp, "k", k, "must be in [1, 2^31)");
  EXA_KERNEL_REQUIRE(x_stride >= k && x_stride <= kMax, kOp, "x_stride", x_stride,
                     "must be at least k");
  EXA_KERNEL_REQUIRE(out_stride >= n && out_stride <= kMax, kOp, "out_stride", out_stride,
                     "must be at least n");
  return absl::OkStatus();
}

absl::Status Gemm(const CublasHandle& handle, const GemmParams& p) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  // Row-major out[rows, n] = x[rows, k] w[n, k]^T is column-major out^T[n, rows] = w x^T:
  // A = w seen as column-major [k, n] transposed, B = x seen as column-major [k, rows].
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t type = CudaType(p.dtype);
  EXA_CUBLAS_CHECK(cublasGemmEx(handle.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.n),
                                static_cast<int>(p.rows), static_cast<int>(p.k), &alpha, p.w, type,
                                static_cast<int>(p.k), p.x, type, static_cast<int>(p.x_stride),
                                &beta, p.out, CUDA_R_32F, static_cast<int>(p.out_stride),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace exa::kernels
