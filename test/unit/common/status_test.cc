// The status macros propagate errors and values without losing the code or message.
#include "common/status.h"

#include <catch2/catch.hpp>

namespace exa {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  EXA_ASSIGN_OR_RETURN(int half, Half(x));
  EXA_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  EXA_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST_CASE("EXA_ASSIGN_OR_RETURN passes values and returns errors", "[status]") {
  CHECK(*Quarter(8) == 2);
  auto odd = Quarter(6);
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CheckEven(4).ok());
  CHECK(CheckEven(3).message() == "odd");
}

TEST_CASE("Annotate keeps the code and prefixes context", "[status]") {
  absl::Status s = Annotate(absl::NotFoundError("no such file"), "config.yaml");
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "config.yaml: no such file");
  CHECK(Annotate(absl::OkStatus(), "x").ok());
}

}  // namespace
}  // namespace exa
