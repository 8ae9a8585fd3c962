// A kernel that does nothing: launched once per device at node start so the context, the module
// load of this library's fatbinary and the first-launch costs are paid before any request
// (docs/architecture.md#cold-start: context warm-up), and timed as part of it.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace exa::kernels {

absl::Status LaunchNoop(cudaStream_t stream);

}  // namespace exa::kernels
