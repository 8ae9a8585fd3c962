// Status propagation for expected failures (STYLE.md "Errors"): bad input, I/O, peers that went
// away. Results are absl::Status / absl::StatusOr<T>; these macros keep call sites short.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define EXA_STATUS_CONCAT_INNER_(a, b) a##b
#define EXA_STATUS_CONCAT_(a, b) EXA_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define EXA_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status exa_status_ = (expr);       \
    if (!exa_status_.ok()) return exa_status_; \
  } while (false)

// `EXA_ASSIGN_OR_RETURN(auto x, ParseThing(s));` declares or assigns `lhs` from a StatusOr,
// returning its status from the enclosing function on error.
#define EXA_ASSIGN_OR_RETURN(lhs, rexpr) \
  EXA_ASSIGN_OR_RETURN_IMPL_(EXA_STATUS_CONCAT_(exa_statusor_, __LINE__), lhs, rexpr)

#define EXA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)   \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace exa {

// Prefixes a status message with context ("config.yaml: ...") keeping the code.
inline absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), std::string(context) + ": " + std::string(status.message()));
}

}  // namespace exa
