// A node's id is made once and kept: a damaged id file stops the daemon instead of silently
// giving the node a new identity in the cluster.
#include "daemon/node_identity.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

namespace exa::daemon {
namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/exa-node-id-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

TEST_CASE("The node id is made once, kept, and never replaced silently", "[daemon]") {
  TempDir dir;
  auto first = LoadOrCreateNodeId(dir.path, "");
  REQUIRE(first.ok());
  CHECK(NodeIdError(*first).empty());
  auto again = LoadOrCreateNodeId(dir.path, "");
  REQUIRE(again.ok());
  CHECK(*again == *first);

  std::ofstream(dir.path + "/node_id") << "not a valid id!!\n";
  auto damaged = LoadOrCreateNodeId(dir.path, "");
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(damaged.status().message()).find("not a valid id!!") != std::string::npos);
  // --node-id still sets it.
  auto set = LoadOrCreateNodeId(dir.path, "node-7");
  REQUIRE(set.ok());
  CHECK(*set == "node-7");
  CHECK(NodeIdError("bad id/..").find("expected 1-64 of [A-Za-z0-9._-]") != std::string::npos);
}

}  // namespace
}  // namespace exa::daemon
