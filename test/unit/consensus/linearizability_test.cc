#include "support/linearizability.h"

#include <catch2/catch.hpp>

namespace exa::testing {
namespace {

KvOperation Put(std::string value, uint64_t version, int64_t invoke, int64_t response) {
  KvOperation op;
  op.kind = KvOperation::Kind::kPut;
  op.key = "k";
  op.value = std::move(value);
  op.version = version;
  op.invoke = invoke;
  op.response = response;
  return op;
}

KvOperation Read(std::optional<std::string> value, uint64_t version, int64_t invoke,
                 int64_t response) {
  KvOperation op;
  op.kind = KvOperation::Kind::kRead;
  op.key = "k";
  op.value = std::move(value);
  op.version = version;
  op.invoke = invoke;
  op.response = response;
  return op;
}

TEST_CASE("sequential writes and reads of the last value are linearizable") {
  CHECK(CheckLinearizable({Put("a", 1, 1, 2), Put("b", 2, 3, 4), Read("b", 2, 5, 6)}).ok);
}

TEST_CASE("a read of an overwritten value after the overwrite answered is not") {
  LinearizabilityResult r =
      CheckLinearizable({Put("a", 1, 1, 2), Put("b", 2, 3, 4), Read("a", 1, 5, 6)});
  CHECK_FALSE(r.ok);
  CHECK(r.key == "k");
}

TEST_CASE("concurrent operations may take either order") {
  CHECK(
      CheckLinearizable({Put("a", 1, 1, 10), Read(std::nullopt, 0, 2, 3), Read("a", 1, 4, 5)}).ok);
  // Once a read saw the new value, a later read may not see the old one.
  CHECK_FALSE(
      CheckLinearizable({Put("a", 1, 1, 10), Read("a", 1, 2, 3), Read(std::nullopt, 0, 4, 5)}).ok);
}

TEST_CASE("an unknown write may have happened or not") {
  KvOperation lost = Put("a", 0, 1, 0);
  lost.unknown = true;
  CHECK(CheckLinearizable({lost, Read(std::nullopt, 0, 5, 6)}).ok);
  CHECK(CheckLinearizable({lost, Read("a", 7, 5, 6)}).ok);
  // ...but not before it was invoked.
  KvOperation late = Put("a", 0, 10, 0);
  late.unknown = true;
  CHECK_FALSE(CheckLinearizable({late, Read("a", 7, 5, 6)}).ok);
}

TEST_CASE("a conditional write must see the version it names") {
  KvOperation cas = Put("b", 3, 5, 6);
  cas.expected_version = 1;
  CHECK(CheckLinearizable({Put("a", 1, 1, 2), cas}).ok);
  KvOperation wrong = Put("b", 3, 5, 6);
  wrong.expected_version = 9;
  CHECK_FALSE(CheckLinearizable({Put("a", 1, 1, 2), wrong}).ok);
  KvOperation refused = Put("c", 0, 5, 6);
  refused.expected_version = 1;
  refused.conflict = true;
  CHECK_FALSE(CheckLinearizable({Put("a", 1, 1, 2), refused}).ok);  // it did hold
}

}  // namespace
}  // namespace exa::testing
