// EXA_CUDA_CHECK / EXA_CUBLAS_CHECK (ggml's CUDA_CHECK idiom, STYLE.md "Errors"): every CUDA
// runtime and cuBLAS call goes through one of them. A failure is an expected runtime condition
// here (no driver, out of device memory, a faulting kernel), not a bug, so the macros return an
// absl::Status from the enclosing function, naming the call, the CUDA error and where it was,
// instead of aborting: the replica fails, the node keeps serving ("Bad input").
//
// After every kernel launch: EXA_CUDA_CHECK(cudaGetLastError()).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"

namespace exa::kernels {

// FAILED_PRECONDITION for a missing driver or device (the machine cannot run CUDA at all),
// RESOURCE_EXHAUSTED for out-of-memory, INTERNAL for everything else.
absl::Status CudaError(cudaError_t error, const char* expr, const char* file, int line);
absl::Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace exa::kernels

#define EXA_CUDA_CHECK(expr)                                                        \
  do {                                                                              \
    const cudaError_t exa_cuda_error_ = (expr);                                     \
    if (exa_cuda_error_ != cudaSuccess) {                                           \
      return ::exa::kernels::CudaError(exa_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                               \
  } while (false)

#define EXA_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                   \
    const cublasStatus_t exa_cublas_status_ = (expr);                                    \
    if (exa_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                   \
      return ::exa::kernels::CublasError(exa_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                    \
  } while (false)
