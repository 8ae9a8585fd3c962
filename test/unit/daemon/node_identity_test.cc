// A node's id is made once and kept: a damaged id file stops the daemon instead of silently
// giving the node a new identity in the cluster.
#include "daemon/node_identity.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "support/temp_dir.h"

namespace exa::daemon {
namespace {

TEST_CASE("One daemon per data dir: the lock refuses a second holder, naming it", "[daemon]") {
  testing::TempDir tmp;
  const std::string dir = tmp.path.string();
  {
    auto first = DataDirLock::Acquire(dir);
    REQUIRE(first.ok());
    auto second = DataDirLock::Acquire(dir);  // another open file: flock refuses it too
    REQUIRE_FALSE(second.ok());
    CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(second.status().message()) ==
          "data dir " + dir + " is in use by another exaserved (pid " + std::to_string(::getpid()) +
              "): each node needs a data dir of its own (--data-dir)");
  }
  CHECK(DataDirLock::Acquire(dir).ok());  // released with its holder
}

TEST_CASE("The node id is made once, kept, and never replaced silently", "[daemon]") {
  testing::TempDir tmp;
  const std::string dir = tmp.path.string();
  auto first = LoadOrCreateNodeId(dir, "");
  REQUIRE(first.ok());
  CHECK(NodeIdError(*first).empty());
  auto again = LoadOrCreateNodeId(dir, "");
  REQUIRE(again.ok());
  CHECK(*again == *first);

  std::ofstream(dir + "/node_id") << "not a valid id!!\n";
  auto damaged = LoadOrCreateNodeId(dir, "");
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(damaged.status().message()).find("not a valid id!!") != std::string::npos);
  // --node-id still sets it.
  auto set = LoadOrCreateNodeId(dir, "node-7");
  REQUIRE(set.ok());
  CHECK(*set == "node-7");
  CHECK(NodeIdError("bad id/..").find("expected 1-64 of [A-Za-z0-9._-]") != std::string::npos);
}

}  // namespace
}  // namespace exa::daemon
