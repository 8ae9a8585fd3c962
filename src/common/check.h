// Invariant checks (STYLE.md "Errors"): a failed EXA_CHECK is a bug in ExaServe, never a
// reaction to outside input. It prints file:line, the condition and the streamed message, then
// aborts. EXA_DCHECK is compiled out in NDEBUG builds, for costly checks.
#pragma once

#include <sstream>

#include "absl/base/optimization.h"

namespace exa::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace exa::internal

// `while` rather than `if` so that `if (a) EXA_CHECK(b) << ...; else ...` binds as written.
#define EXA_CHECK(cond)               \
  while (ABSL_PREDICT_FALSE(!(cond))) \
  ::exa::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#ifdef NDEBUG
#define EXA_DCHECK(cond) \
  while (false && !(cond)) ::exa::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()
#else
#define EXA_DCHECK(cond) EXA_CHECK(cond)
#endif
