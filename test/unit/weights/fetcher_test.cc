// The node fetcher: tiers in order with fallback, corrupt chunks discarded and refetched from the
// next tier, a mid-chunk failure resumed at the same byte, restarts that keep verified chunks,
// and nothing written outside the cache directory.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "test_tiers.h"
#include "weights/fetcher.h"
#include "weights/layout.h"
#include "weights/model_cache.h"
#include "weights/publish.h"

namespace exa::weights {
namespace {

using testing::TempDir;

struct Fixture {
  TempDir tmp;
  DirectorySource origin_source{(tmp.path / "origin").string()};
  DirectorySource peer_source{(tmp.path / "peer").string()};
  testing::SourceTier origin{"origin", origin_source};
  testing::SourceTier peer{"rack-cache", peer_source};
  Manifest manifest;

  Fixture() {
    testing::WriteModelDir(tmp.path / "src", {40000, 9000});
    manifest =
        *PublishModel(tmp.path / "src", tmp.path / "origin", "m", "v1", {.chunk_bytes = 4096});
    // The peer holds a full copy (as a DirectorySource it serves like a warmed cache).
    REQUIRE(
        PublishModel(tmp.path / "src", tmp.path / "peer", "m", "v1", {.chunk_bytes = 4096}).ok());
  }
  FetchOptions Options(int parallel = 4) {
    FetchOptions o;
    o.cache_dir = (tmp.path / "node").string();
    o.parallel = parallel;
    o.tier_backoff = absl::Seconds(30);
    return o;
  }
  void ExpectVerified() {
    auto report = VerifyModel(tmp.path / "node", "m", "v1", 2);
    REQUIRE(report.ok());
    CHECK(report->bad.empty());
    CHECK(VerifiedModelDir(tmp.path / "node", "m", "v1").ok());
  }
};

TEST_CASE("A pull takes everything from the first tier and ends verified", "[weights]") {
  Fixture f;
  Fetcher fetcher({&f.peer, &f.origin}, f.Options());
  std::vector<PullProgress> seen;
  auto r = fetcher.Pull("m", "", [&](const PullProgress& p) { seen.push_back(p); });
  REQUIRE(r.ok());
  CHECK(r->manifest.version == "v1");
  CHECK(r->bytes_by_tier["rack-cache"] == f.manifest.TotalBytes());
  CHECK(r->bytes_by_tier["origin"] == 0);
  CHECK(f.origin.fetches == 0);
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back().finished);
  CHECK(seen.back().done_bytes == f.manifest.TotalBytes());
  f.ExpectVerified();

  // A second pull finds everything local.
  auto again = fetcher.Pull("m", "v1");
  REQUIRE(again.ok());
  CHECK(again->local_bytes == f.manifest.TotalBytes());
  CHECK(f.peer.fetches == static_cast<int>(f.manifest.TotalChunks()));
}

TEST_CASE("Pulls of one model into one cache at once: one fetches, the others wait for it",
          "[weights]") {
  // Two replicas of a model starting together on a node (or the CLI beside the daemon) used to
  // write the same partial files and fail renaming them into place.
  Fixture f;
  std::vector<absl::StatusOr<PullResult>> results(4, absl::UnknownError("not run"));
  std::vector<std::thread> pulls;
  for (size_t i = 0; i < results.size(); ++i) {
    pulls.emplace_back([&f, &results, i] {
      Fetcher fetcher({&f.peer, &f.origin}, f.Options());
      results[i] = fetcher.Pull("m", "v1");
    });
  }
  for (auto& t : pulls) t.join();
  uint64_t local = 0;
  for (const auto& r : results) {
    REQUIRE(r.ok());
    local += r->local_bytes;
  }
  CHECK(f.peer.fetches == static_cast<int>(f.manifest.TotalChunks()));  // each chunk once
  CHECK(local == 3 * f.manifest.TotalBytes());
  f.ExpectVerified();
}

TEST_CASE("A tier that is down is skipped", "[weights]") {
  Fixture f;
  f.peer.down = true;
  Fetcher fetcher({&f.peer, &f.origin}, f.Options());
  auto r = fetcher.Pull("m", "v1");
  REQUIRE(r.ok());
  CHECK(r->bytes_by_tier["origin"] == f.manifest.TotalBytes());
  // Once marked down, the peer is not asked for every chunk.
  CHECK(r->tier_failures <= 4);
  f.ExpectVerified();
}

TEST_CASE("A corrupt chunk from the peer is discarded, counted and refetched from the origin",
          "[weights]") {
  Fixture f;
  testing::FlipByte(ModelDir(f.tmp.path / "peer", "m", "v1") / "model-00001.safetensors", 10000);
  Fetcher fetcher({&f.peer, &f.origin}, f.Options());
  auto r = fetcher.Pull("m", "v1");
  REQUIRE(r.ok());
  CHECK(r->corrupt_chunks == 1);
  CHECK(r->bytes_by_tier["origin"] == 4096);  // exactly the bad chunk
  f.ExpectVerified();
}

TEST_CASE("A peer that dies mid-pull: the pull completes from the origin", "[weights]") {
  Fixture f;
  f.peer.piece_bytes = 1000;
  f.peer.fail_after_bytes = 10000;  // dies inside the third chunk
  Fetcher fetcher({&f.peer, &f.origin}, f.Options(1));
  auto r = fetcher.Pull("m", "v1");
  REQUIRE(r.ok());
  CHECK(r->tier_failures >= 1);
  CHECK(r->bytes_by_tier["rack-cache"] > 10000);
  CHECK(r->bytes_by_tier["rack-cache"] % 4096 != 0);  // it broke off inside a chunk
  // The chunk that broke off resumed at the same byte: nothing was fetched twice.
  CHECK(r->bytes_by_tier["rack-cache"] + r->bytes_by_tier["origin"] == f.manifest.TotalBytes());
  f.ExpectVerified();
}

TEST_CASE("When every tier fails the pull says which chunk and why, and keeps what it has",
          "[weights]") {
  Fixture f;
  f.origin.fail_after_bytes = 20000;
  f.peer.down = true;
  Fetcher fetcher({&f.peer, &f.origin}, f.Options(1));
  auto r = fetcher.Pull("m", "v1");
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsUnavailable(r.status()));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("every tier failed"));
  // Nothing unverified is visible under the final name.
  CHECK_FALSE(std::filesystem::exists(ModelDir(f.tmp.path / "node", "m", "v1") /
                                      "model-00001.safetensors"));
  // The next pull resumes: verified chunks are not fetched again.
  f.origin.fail_after_bytes = -1;
  f.peer.down = false;
  auto again = fetcher.Pull("m", "v1");
  REQUIRE(again.ok());
  CHECK(again->local_bytes >= 16384);
  f.ExpectVerified();
}

TEST_CASE("Out of space: a clear error, and no partial files left behind", "[weights]") {
  Fixture f;
  // A file-size limit below the big shard stands in for a full disk (EFBIG like ENOSPC).
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 20000;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  Fetcher fetcher({&f.peer, &f.origin}, f.Options());
  auto r = fetcher.Pull("m", "v1");
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsResourceExhausted(r.status()));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("disk full"));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains(".exa-part"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(f.tmp.path / "node")) {
    INFO(e.path());
    CHECK(e.path().string().find(".exa-part") == std::string::npos);
  }
  CHECK(f.peer.fetches + f.origin.fetches == 0);  // refused before fetching anything
  // With room again the pull completes.
  REQUIRE(fetcher.Pull("m", "v1").ok());
  f.ExpectVerified();
}

TEST_CASE("A cancelled pull stops promptly and the next one resumes", "[weights]") {
  Fixture f;
  std::atomic<bool> cancel{false};
  f.peer.on_fetch = [&](const ChunkKey&) {
    if (f.peer.fetches == 4) cancel = true;  // during the fourth chunk
  };
  FetchOptions options = f.Options(1);
  options.cancelled = [&] { return cancel.load(); };
  auto r = Fetcher({&f.peer, &f.origin}, options).Pull("m", "v1");
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsCancelled(r.status()));
  CHECK(f.peer.fetches == 4);
  CHECK(f.origin.fetches == 0);
  auto again = Fetcher({&f.peer, &f.origin}, f.Options()).Pull("m", "v1");
  REQUIRE(again.ok());
  CHECK(again->local_bytes > 0);
  f.ExpectVerified();
}

TEST_CASE("Unknown models are NOT_FOUND and bad names INVALID_ARGUMENT", "[weights]") {
  Fixture f;
  Fetcher fetcher({&f.peer, &f.origin}, f.Options());
  CHECK(absl::IsNotFound(fetcher.Pull("nope", "v1").status()));
  CHECK(absl::IsNotFound(fetcher.Pull("m", "v7").status()));
  CHECK(absl::IsInvalidArgument(fetcher.Pull("../etc", "v1").status()));
  CHECK(absl::IsInvalidArgument(fetcher.Pull("m", "../../x").status()));
}

TEST_CASE("O_DIRECT and buffered writes, aligned or not, give the same verified copy",
          "[weights]") {
  for (bool direct : {true, false}) {
    for (size_t piece : {size_t{4096}, size_t{1000}}) {
      Fixture fx;
      fx.peer.piece_bytes = piece;  // 1000: unaligned offsets, written buffered
      FetchOptions o = fx.Options();
      o.direct_io = direct;
      Fetcher fetcher({&fx.peer}, o);
      auto r = fetcher.Pull("m", "v1");
      REQUIRE(r.ok());
      auto report = VerifyModel(fx.tmp.path / "node", "m", "v1", 2);
      REQUIRE(report.ok());
      CHECK(report->bad.empty());
    }
  }
}

TEST_CASE("WritePiecesAt writes more pieces than one pwritev takes, in order", "[weights]") {
  TempDir tmp;
  const fs::path path = tmp.path / "f";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  std::string expected;
  std::vector<std::string> storage;
  for (int i = 0; i < 3000; ++i) storage.push_back(std::string(1 + i % 7, char('a' + i % 26)));
  storage.push_back("");  // empty pieces are skipped
  std::vector<std::string_view> pieces(storage.begin(), storage.end());
  for (const auto& p : storage) expected += p;
  REQUIRE(WritePiecesAt(fd, path, 10, pieces).ok());
  ::close(fd);
  auto got = ReadSmallFile(path, 1 << 20);
  REQUIRE(got.ok());
  CHECK(got->substr(10) == expected);
  CHECK(got->size() == expected.size() + 10);
}

}  // namespace
}  // namespace exa::weights
