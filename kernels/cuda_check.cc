#include "kernels/cuda_check.h"

#include <cublas_v2.h>

#include "common/strings.h"

namespace exa::kernels {
namespace {

std::string Where(const char* expr, const char* file, int line) {
  std::string_view path(file);
  const size_t slash = path.rfind('/');
  if (slash != std::string_view::npos) path.remove_prefix(slash + 1);
  return StrCat(expr, " at ", path, ":", line);
}

}  // namespace

absl::Status CudaError(cudaError_t error, const char* expr, const char* file, int line) {
  std::string message = StrCat("CUDA error ", cudaGetErrorName(error), " (",
                               cudaGetErrorString(error), ") in ", Where(expr, file, line));
  switch (error) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNotSupported:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorStubLibrary:
    case cudaErrorNoKernelImageForDevice:
      return absl::FailedPreconditionError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line) {
  std::string message = StrCat("cuBLAS error ", cublasGetStatusName(status), " (",
                               cublasGetStatusString(status), ") in ", Where(expr, file, line));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (status == CUBLAS_STATUS_NOT_INITIALIZED || status == CUBLAS_STATUS_ARCH_MISMATCH) {
    return absl::FailedPreconditionError(message);
  }
  return absl::InternalError(message);
}

}  // namespace exa::kernels
