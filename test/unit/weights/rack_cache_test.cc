// The rack cache: concurrent misses for one chunk share one upstream fetch, the LRU keeps it
// under its byte budget without evicting pinned models, and a corrupt upstream chunk is refused.
#include <catch2/catch.hpp>

#include <thread>

#include "absl/synchronization/notification.h"
#include "metrics/registry.h"
#include "test_tiers.h"
#include "weights/layout.h"
#include "weights/model_cache.h"
#include "weights/publish.h"
#include "weights/rack_cache.h"
#include "weights/sha256.h"

namespace exa::weights {
namespace {

using testing::TempDir;

struct Fixture {
  TempDir tmp;
  DirectorySource origin_source{(tmp.path / "origin").string()};
  testing::SourceTier origin{"origin", origin_source};
  metrics::Registry registry;
  Manifest manifest;

  explicit Fixture(std::vector<uint64_t> sizes = {16384, 8192}) {
    testing::WriteModelDir(tmp.path / "src", sizes);
    manifest =
        *PublishModel(tmp.path / "src", tmp.path / "origin", "m", "v1", {.chunk_bytes = 4096});
  }
  RackCacheOptions Options(uint64_t budget) {
    return {.root = (tmp.path / "rack").string(), .budget_bytes = budget};
  }
};

std::string ReadAll(ChunkReader& r) {
  std::string out(r.size(), '\0');
  REQUIRE(r.ReadAt(0, out.data(), out.size()).ok());
  return out;
}

TEST_CASE("Concurrent misses for one chunk share one upstream fetch", "[weights]") {
  Fixture f;
  absl::Notification release;
  f.origin.on_fetch = [&](const ChunkKey&) { release.WaitForNotification(); };
  RackCache cache(f.Options(1 << 30), f.origin, f.registry);
  REQUIRE(cache.Start().ok());
  const ChunkKey key{"m", "v1", "model-00001.safetensors", 1};
  std::vector<std::thread> readers;
  std::vector<std::string> got(8);
  std::vector<absl::Status> status(8);
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] {
      auto r = cache.OpenChunk(key, {});
      status[i] = r.status();
      if (!r.ok()) return;
      got[i].resize((*r)->size());
      status[i] = (*r)->ReadAt(0, got[i].data(), got[i].size()).status();
    });
  }
  // Wait until all eight are inside OpenChunk (one fetching, seven waiting on its flight).
  for (absl::Time deadline = absl::Now() + absl::Seconds(10);
       (cache.stats().misses + cache.stats().coalesced < 8) && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  release.Notify();
  for (auto& t : readers) t.join();
  for (const auto& s : status) CHECK(s.ToString() == "OK");
  CHECK(f.origin.fetches == 1);
  CHECK(cache.stats().misses == 1);
  CHECK(cache.stats().coalesced == 7);
  CHECK(cache.stats().upstream_bytes == 4096);
  for (const auto& g : got) CHECK(Sha256Hex(g) == f.manifest.files[1].chunks[1].sha256);
  // Now it is a hit.
  REQUIRE(cache.OpenChunk(key, {}).ok());
  CHECK(cache.stats().hits == 1);
  CHECK(f.origin.fetches == 1);
}

TEST_CASE("LRU eviction keeps the cache under budget and never evicts pinned models", "[weights]") {
  Fixture f({16384});  // four 4 KiB chunks
  RackCache cache(f.Options(3 * 4096), f.origin, f.registry);
  REQUIRE(cache.Start().ok());
  auto open = [&](uint32_t i) {
    REQUIRE(cache.OpenChunk({"m", "v1", "model-00001.safetensors", i}, {}).ok());
  };
  open(0);
  open(1);
  open(2);
  open(0);  // 1 is now the least recently used
  open(3);
  CHECK(cache.stats().evictions == 1);
  CHECK(cache.stats().cached_bytes == 3 * 4096);
  CHECK_FALSE(std::filesystem::exists(cache.ChunkPath(f.manifest.files[1].chunks[1].sha256)));
  CHECK(std::filesystem::exists(cache.ChunkPath(f.manifest.files[1].chunks[0].sha256)));

  // Pin the model: nothing of it is evicted, even over budget.
  REQUIRE(SetPinned(f.tmp.path / "rack", "m", "v1", true).ok());
  open(1);
  CHECK(cache.stats().evictions == 1);
  CHECK(cache.stats().cached_bytes == 4 * 4096);
}

TEST_CASE("A corrupt upstream chunk is refused, counted and not cached", "[weights]") {
  Fixture f;
  f.origin.corrupt = true;
  RackCache cache(f.Options(1 << 30), f.origin, f.registry);
  REQUIRE(cache.Start().ok());
  auto r = cache.OpenChunk({"m", "v1", "model-00001.safetensors", 0}, {});
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsDataLoss(r.status()));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("expected"));
  CHECK(cache.stats().corrupt_upstream == 1);
  CHECK(cache.stats().cached_bytes == 0);
  f.origin.corrupt = false;
  CHECK(cache.OpenChunk({"m", "v1", "model-00001.safetensors", 0}, {}).ok());
}

TEST_CASE("An upstream stream that breaks mid-chunk resumes where it stopped", "[weights]") {
  Fixture f;
  f.origin.piece_bytes = 1024;
  f.origin.fail_after_bytes = 2048;
  RackCache cache(f.Options(1 << 30), f.origin, f.registry);
  REQUIRE(cache.Start().ok());
  // The first attempt stops at 2048; clear the fault so the retry continues from there.
  f.origin.on_fetch = [&](const ChunkKey&) {
    if (f.origin.fetches == 2) f.origin.fail_after_bytes = -1;
  };
  auto r = cache.OpenChunk({"m", "v1", "model-00001.safetensors", 0}, {});
  REQUIRE(r.ok());
  CHECK(Sha256Hex(ReadAll(**r)) == f.manifest.files[1].chunks[0].sha256);
  CHECK(cache.stats().upstream_bytes == 4096);  // nothing fetched twice
}

TEST_CASE("The cache re-indexes its chunks after a restart", "[weights]") {
  Fixture f;
  {
    RackCache cache(f.Options(1 << 30), f.origin, f.registry);
    REQUIRE(cache.Start().ok());
    REQUIRE(cache.OpenChunk({"m", "v1", "model-00001.safetensors", 0}, {}).ok());
  }
  metrics::Registry registry2;
  f.origin.down = true;
  RackCache cache(f.Options(1 << 30), f.origin, registry2);
  REQUIRE(cache.Start().ok());
  CHECK(cache.stats().cached_bytes == 4096);
  CHECK(cache.OpenChunk({"m", "v1", "model-00001.safetensors", 0}, {}).ok());
  CHECK(
      absl::IsUnavailable(cache.OpenChunk({"m", "v1", "model-00001.safetensors", 1}, {}).status()));
}

}  // namespace
}  // namespace exa::weights

namespace exa::weights {
namespace {

TEST_CASE("Chunks found on disk at start are re-checked when first served; a bad one is dropped",
          "[weights]") {
  Fixture f;
  const ChunkKey key{"m", "v1", "model-00001.safetensors", 0};
  {
    RackCache cache(f.Options(1 << 30), f.origin, f.registry);
    REQUIRE(cache.Start().ok());
    auto r = cache.OpenChunk(key, {});
    REQUIRE(r.ok());
    CHECK((*r)->expected_sha256().empty());  // fetched and checked by this process
  }
  metrics::Registry registry2;
  RackCache cache(f.Options(1 << 30), f.origin, registry2);
  REQUIRE(cache.Start().ok());
  auto r = cache.OpenChunk(key, {});
  REQUIRE(r.ok());
  CHECK((*r)->expected_sha256() == f.manifest.files[1].chunks[0].sha256);
  (*r)->ReportVerified(false);  // what the service reports after hashing a flipped byte
  CHECK(cache.stats().corrupt_local == 1);
  CHECK(cache.stats().cached_bytes == 0);
  CHECK_FALSE(std::filesystem::exists(cache.ChunkPath(f.manifest.files[1].chunks[0].sha256)));
  const int fetches = f.origin.fetches;
  auto again = cache.OpenChunk(key, {});
  REQUIRE(again.ok());
  CHECK(f.origin.fetches == fetches + 1);  // a good copy from upstream
  CHECK((*again)->expected_sha256().empty());
  CHECK_THAT(registry2.Expose(), Catch::Contains("exaserve_weights_cache_corrupt_local_total 1"));
}

}  // namespace
}  // namespace exa::weights
