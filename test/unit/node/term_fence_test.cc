#include "node/term_fence.h"

#include <catch2/catch.hpp>

namespace exa::node {
namespace {

TEST_CASE("a deposed leader's late command is refused; the current and later terms pass") {
  TermFence fence;
  CHECK(fence.Admit(3, "Node.StartReplica").ok());
  CHECK(fence.Admit(3, "Node.StopReplica").ok());
  CHECK(fence.Admit(5, "Node.StopReplica").ok());  // a new leader
  absl::Status late = fence.Admit(3, "Node.StopReplica");
  CHECK(absl::IsFailedPrecondition(late));
  CHECK(std::string(late.message()).find("term 3 refused: term 5") != std::string::npos);
  CHECK(fence.highest() == 5);
  CHECK(fence.Admit(0, "Node.StopReplica").ok());  // an operator's own command
}

}  // namespace
}  // namespace exa::node
