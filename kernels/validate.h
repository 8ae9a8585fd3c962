// Argument checks shared by the kernels' Validate() methods: the message names the op, the
// field, its value and what is allowed ("rms_norm: cols 0: must be at least 1").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace exa::kernels {

inline absl::Status InvalidArgument(const char* op, const char* field, int64_t value,
                                    const char* allowed) {
  return absl::InvalidArgumentError(std::string(op) + ": " + field + " " + std::to_string(value) +
                                    ": " + allowed);
}

inline absl::Status NullPointer(const char* op, const char* field) {
  return absl::InvalidArgumentError(std::string(op) + ": " + field + " is null");
}

}  // namespace exa::kernels

// Returns INVALID_ARGUMENT from the enclosing Validate() unless `cond` holds.
#define EXA_KERNEL_REQUIRE(cond, op, field, value, allowed)                         \
  do {                                                                              \
    if (!(cond)) return ::exa::kernels::InvalidArgument(op, field, value, allowed); \
  } while (false)

#define EXA_KERNEL_REQUIRE_PTR(ptr, op)                                 \
  do {                                                                  \
    if ((ptr) == nullptr) return ::exa::kernels::NullPointer(op, #ptr); \
  } while (false)
