// Row gather, widening to fp32: out[i, :] = table[ids[i], :]. Serves the token embedding (a bf16
// or fp16 table) and the selection of the rows that get logits (an fp32 activation matrix).
// Ids are checked on the host before the step (engine/model.cc); the kernel trusts them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace exa::kernels {

struct EmbeddingParams {
  const void* table = nullptr;   // [table_rows, cols] in table_dtype, row stride table_stride
  const int32_t* ids = nullptr;  // [count] device, each in [0, table_rows)
  float* out = nullptr;          // [count, cols] fp32, row stride out_stride
  Dtype table_dtype = Dtype::kBF16;
  int64_t table_rows = 0;
  int64_t cols = 0;
  int64_t table_stride = 0;
  int64_t out_stride = 0;
  int64_t count = 0;

  absl::Status Validate() const;
};

absl::Status LaunchEmbedding(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace exa::kernels
