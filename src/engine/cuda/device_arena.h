// DeviceArena: the bookkeeping of a replica's device memory pool (docs/architecture.md#cold-start:
// memory pooling). The pool is one allocation reserved when the replica starts, sized from its
// budget; every buffer the replica uses (activations, KV cache, cuBLAS and attention workspaces,
// step metadata) is carved from it in order, so the step loop never allocates. Pure arithmetic over
// addresses: the CUDA side (cuda_backend.cc) owns the memory.
//
// Thread safety: none; used while a replica is being built.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/strings.h"

namespace exa::engine::cuda {

class DeviceArena {
 public:
  // 256 bytes: cudaMalloc's own alignment, enough for every vector load the kernels do.
  static constexpr int64_t kAlignment = 256;

  static constexpr int64_t AlignUp(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }

  DeviceArena(uintptr_t base, int64_t capacity_bytes) : base_(base), capacity_(capacity_bytes) {}

  // The next `bytes` (aligned) of the pool; RESOURCE_EXHAUSTED naming `what` when it is full.
  absl::StatusOr<uintptr_t> Take(int64_t bytes, std::string_view what) {
    if (bytes < 0) {
      return absl::InvalidArgumentError(
          StrCat("device pool: ", what, " asks for ", bytes, " bytes"));
    }
    const int64_t size = AlignUp(bytes);
    if (size > capacity_ - used_) {
      return absl::ResourceExhaustedError(StrCat("device pool: ", what, " needs ", size,
                                                 " bytes but only ", capacity_ - used_, " of ",
                                                 capacity_, " are left"));
    }
    const uintptr_t at = base_ + static_cast<uintptr_t>(used_);
    used_ += size;
    return at;
  }

  int64_t used_bytes() const { return used_; }
  int64_t capacity_bytes() const { return capacity_; }

 private:
  uintptr_t base_;
  int64_t capacity_;
  int64_t used_ = 0;
};

}  // namespace exa::engine::cuda
