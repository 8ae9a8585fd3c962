#include "consensus/log_storage.h"

#include <catch2/catch.hpp>
#include <random>

#include "consensus/rocks_log_storage.h"
#include "support/temp_dir.h"

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

namespace exa::consensus {
namespace {

void CheckSame(LogStorage& a, LogStorage& b) {
  absl::StatusOr<StoredState> x = a.Load();
  absl::StatusOr<StoredState> y = b.Load();
  REQUIRE(x.ok());
  REQUIRE(y.ok());
  CHECK(x->term == y->term);
  CHECK(x->voted_for == y->voted_for);
  CHECK(x->first_index == y->first_index);
  CHECK(x->entries == y->entries);
  REQUIRE(x->snapshot.has_value() == y->snapshot.has_value());
  if (x->snapshot) {
    CHECK(x->snapshot->index == y->snapshot->index);
    CHECK(x->snapshot->configuration == y->snapshot->configuration);
    CHECK(x->snapshot->data == y->snapshot->data);
  }
}

TEST_CASE("RocksDB storage matches the in-memory one through random operations and reopens") {
  exa::testing::TempDir dir;
  std::string path = (dir.path / "raft").string();
  MemoryLogStorage memory;
  auto rocks = RocksLogStorage::Open(path);
  REQUIRE(rocks.ok());
  std::mt19937 rng(7);
  uint64_t term = 1;
  for (int step = 0; step < 400; ++step) {
    const StoredState& m = memory.state();
    uint64_t next = m.first_index + m.entries.size();
    // Raft never rewrites what a snapshot covers (it is committed).
    uint64_t floor = std::max<uint64_t>(m.first_index, m.snapshot ? m.snapshot->index + 1 : 1);
    uint64_t movable = next > floor ? next - floor : 0;
    switch (rng() % 6) {
      case 0:
        term += rng() % 2;
        REQUIRE(memory.SetTermVote(term, rng() % 3).ok());
        REQUIRE((*rocks)->SetTermVote(term, memory.state().voted_for).ok());
        break;
      case 1:
      case 2: {
        uint64_t at = next - std::min<uint64_t>(movable, rng() % 3);
        std::vector<StoredEntry> entries = Entries(term, 1 + static_cast<int>(rng() % 4));
        REQUIRE(memory.Append(at, entries).ok());
        REQUIRE((*rocks)->Append(at, entries).ok());
        break;
      }
      case 3: {
        uint64_t at = next - std::min<uint64_t>(movable, rng() % 3);
        REQUIRE(memory.TruncateFrom(at).ok());
        REQUIRE((*rocks)->TruncateFrom(at).ok());
        break;
      }
      case 4: {
        if (m.entries.empty()) break;
        StoredSnapshot snap{
            next - 1, term, {{11, "s1", 1}, {12, "s2", 0}}, 1, "state" + std::to_string(step)};
        uint64_t trailing = rng() % 3 == 0 ? 0 : rng() % 5 + 1;
        REQUIRE(memory.PutSnapshot(snap, trailing).ok());
        REQUIRE((*rocks)->PutSnapshot(snap, trailing).ok());
        break;
      }
      default:
        rocks->reset();
        rocks = RocksLogStorage::Open(path);
        REQUIRE(rocks.ok());
        break;
    }
    CheckSame(memory, **rocks);
  }
}

}  // namespace
}  // namespace exa::consensus
