#include "node/term_fence.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "common/file_util.h"

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

TEST_CASE("a fence with a file still refuses a deposed leader after a restart") {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("term-fence-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/scheduler-term";
  {
    TermFence fence;
    REQUIRE(fence.Open(path).ok());  // no file yet: term 0
    CHECK(fence.highest() == 0);
    CHECK(fence.Admit(7, "Node.StartReplica").ok());
  }
  TermFence restarted;
  REQUIRE(restarted.Open(path).ok());
  CHECK(restarted.highest() == 7);
  CHECK(absl::IsFailedPrecondition(restarted.Admit(6, "Node.StopReplica")));
  CHECK(restarted.Admit(8, "Node.StopReplica").ok());
  TermFence again;
  REQUIRE(again.Open(path).ok());
  CHECK(again.highest() == 8);

  // A damaged file is refused, naming it, rather than read as term 0.
  REQUIRE(WriteFileAtomically(path, "eight\n").ok());
  TermFence damaged;
  absl::Status s = damaged.Open(path);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).find(path) != std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace exa::node
