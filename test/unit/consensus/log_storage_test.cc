#include "consensus/log_storage.h"

#include <catch2/catch.hpp>

namespace exa::consensus {
namespace {

std::vector<StoredEntry> Entries(uint64_t term, int n) {
  std::vector<StoredEntry> out;
  for (int i = 0; i < n; ++i) out.push_back({term, 1, "e" + std::to_string(i)});
  return out;
}

TEST_CASE("append, truncate and snapshots keep the log's indexes straight") {
  MemoryLogStorage s;
  REQUIRE(s.Append(1, Entries(1, 10)).ok());
  REQUIRE(s.TruncateFrom(8).ok());
  CHECK(s.state().entries.size() == 7);
  REQUIRE(s.Append(8, Entries(2, 3)).ok());
  CHECK(s.state().entries.back().term == 2);
  CHECK_FALSE(s.Append(20, Entries(2, 1)).ok());  // a gap

  StoredSnapshot snap;
  snap.index = 8;
  REQUIRE(s.PutSnapshot(snap, 3).ok());  // keeps 6, 7, 8 and what follows
  CHECK(s.state().first_index == 6);
  CHECK(s.state().entries.size() == 5);

  REQUIRE(s.PutSnapshot(StoredSnapshot{20, 3, {}, 0, "x"}, 0).ok());  // installed from a leader
  CHECK(s.state().entries.empty());
  CHECK(s.state().first_index == 21);
  REQUIRE(s.Append(21, Entries(3, 1)).ok());
}

}  // namespace
}  // namespace exa::consensus
