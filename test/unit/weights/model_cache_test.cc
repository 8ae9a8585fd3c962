// Publishing computes a manifest an origin can serve; model verify names a flipped chunk; rm,
// pin and the verified markers behave as the CLI promises.
#include <sys/stat.h>

#include <atomic>
#include <thread>

#include <catch2/catch.hpp>

#include "test_tiers.h"
#include "weights/layout.h"
#include "weights/model_cache.h"
#include "weights/publish.h"

namespace exa::weights {
namespace {

using testing::TempDir;

TEST_CASE("Publish writes the files and a manifest whose chunk hashes match", "[weights]") {
  TempDir tmp;
  testing::WriteModelDir(tmp.path / "src", {20000, 4096, 0});
  auto m = PublishModel(tmp.path / "src", tmp.path / "origin", "tiny", "v1", {.chunk_bytes = 4096});
  REQUIRE(m.ok());
  CHECK(m->files.size() == 4);
  CHECK(m->TotalChunks() == 5 + 1 + 0 + 1);
  auto loaded = LoadManifest(tmp.path / "origin", "tiny", "v1");
  REQUIRE(loaded.ok());
  CHECK(*loaded == *m);
  // Versions are immutable.
  auto again = PublishModel(tmp.path / "src", tmp.path / "origin", "tiny", "v1", {});
  CHECK(absl::IsAlreadyExists(again.status()));
  // Hidden files (VCS state) are not part of the model.
  std::ofstream(tmp.path / "src" / ".hidden") << "x";
  auto m2 = ComputeManifest(tmp.path / "src", "tiny", "v2", {.chunk_bytes = 4096});
  REQUIRE(m2.ok());
  CHECK(m2->FindFile(".hidden") == nullptr);
}

TEST_CASE("model verify re-hashes and names the chunk with a flipped byte", "[weights]") {
  TempDir tmp;
  testing::WriteModelDir(tmp.path / "src", {20000});
  auto m = PublishModel(tmp.path / "src", tmp.path / "c", "tiny", "v1", {.chunk_bytes = 4096});
  REQUIRE(m.ok());
  auto ok = VerifyModel(tmp.path / "c", "tiny", "v1", 2);
  REQUIRE(ok.ok());
  CHECK(ok->bad.empty());
  CHECK(ok->chunks == 6);
  REQUIRE(VerifiedModelDir(tmp.path / "c", "tiny", "v1").ok());

  testing::FlipByte(ModelDir(tmp.path / "c", "tiny", "v1") / "model-00001.safetensors", 9000);
  auto bad = VerifyModel(tmp.path / "c", "tiny", "v1", 2);
  REQUIRE(bad.ok());
  REQUIRE(bad->bad.size() == 1);
  CHECK(bad->bad[0].path == "model-00001.safetensors");
  CHECK(bad->bad[0].chunk_index == 2);
  // Its marker is gone, so the engine would not load it.
  CHECK(absl::IsFailedPrecondition(VerifiedModelDir(tmp.path / "c", "tiny", "v1").status()));
}

TEST_CASE("A file changed after verification loses its marker's match", "[weights]") {
  TempDir tmp;
  testing::WriteModelDir(tmp.path / "src", {5000});
  auto m = PublishModel(tmp.path / "src", tmp.path / "c", "tiny", "v1", {.chunk_bytes = 4096});
  REQUIRE(m.ok());
  REQUIRE(VerifyModel(tmp.path / "c", "tiny", "v1", 1).ok());
  const FileEntry& f = *m->FindFile("model-00001.safetensors");
  CHECK(HasVerifiedMarker(tmp.path / "c", *m, f));
  std::ofstream(ModelDir(tmp.path / "c", "tiny", "v1") / f.path, std::ios::app) << "x";
  CHECK_FALSE(HasVerifiedMarker(tmp.path / "c", *m, f));
}

TEST_CASE("ls, pin and rm", "[weights]") {
  TempDir tmp;
  testing::WriteModelDir(tmp.path / "src", {5000});
  REQUIRE(PublishModel(tmp.path / "src", tmp.path / "c", "tiny", "v1", {.chunk_bytes = 4096}).ok());
  auto list = ListCachedModels(tmp.path / "c");
  REQUIRE(list.size() == 1);
  CHECK_FALSE(list[0].pinned);
  CHECK_FALSE(list[0].complete);  // published, not yet verified here
  REQUIRE(SetPinned(tmp.path / "c", "tiny", "v1", true).ok());
  CHECK(ListCachedModels(tmp.path / "c")[0].pinned);
  CHECK(absl::IsNotFound(SetPinned(tmp.path / "c", "tiny", "v2", true)));
  REQUIRE(RemoveModel(tmp.path / "c", "tiny", "v1").ok());
  CHECK(ListCachedModels(tmp.path / "c").empty());
  CHECK(absl::IsNotFound(RemoveModel(tmp.path / "c", "tiny", "v1")));
  CHECK(absl::IsInvalidArgument(RemoveModel(tmp.path / "c", "..", "v1")));
}

TEST_CASE("A failed publish leaves nothing behind, so the version can be published after all",
          "[weights]") {
  TempDir tmp;
  const fs::path origin = tmp.path / "origin";
  testing::WriteModelDir(tmp.path / "src", {5000});
  std::ofstream(tmp.path / "src" / "bad\\name") << "x";  // a path a manifest refuses
  auto failed = PublishModel(tmp.path / "src", origin, "tiny", "v1", {.chunk_bytes = 4096});
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(std::string(failed.status().message()), Catch::Contains("bad\\name"));
  CHECK_FALSE(fs::exists(ModelDir(origin, "tiny", "v1")));
  CHECK_FALSE(fs::exists(ModelDir(origin, "tiny", "v1.publishing")));
  fs::remove(tmp.path / "src" / "bad\\name");
  REQUIRE(PublishModel(tmp.path / "src", origin, "tiny", "v1", {.chunk_bytes = 4096}).ok());

  // Not a directory, a FIFO: refused naming the path, before anything is copied.
  std::ofstream(tmp.path / "afile") << "x";
  auto file = PublishModel(tmp.path / "afile", origin, "tiny", "v2", {});
  CHECK(absl::IsInvalidArgument(file.status()));
  CHECK_THAT(std::string(file.status().message()), Catch::Contains("not a directory"));
  REQUIRE(::mkfifo((tmp.path / "src" / "fifo").c_str(), 0600) == 0);
  auto fifo = PublishModel(tmp.path / "src", origin, "tiny", "v2", {});
  CHECK_THAT(std::string(fifo.status().message()), Catch::Contains("fifo: not a regular file"));
  CHECK_FALSE(fs::exists(ModelDir(origin, "tiny", "v2")));
  // An empty directory is no model.
  fs::create_directories(tmp.path / "empty");
  CHECK_THAT(
      std::string(PublishModel(tmp.path / "empty", origin, "tiny", "v3", {}).status().message()),
      Catch::Contains("no files to publish"));
  // A version named like the layout's files beside another version is refused.
  fs::remove(tmp.path / "src" / "fifo");
  CHECK(absl::IsInvalidArgument(
      PublishModel(tmp.path / "src", origin, "tiny", "v1.publishing", {}).status()));
  CHECK(LoadManifest(origin, "tiny", "v1").ok());
}

TEST_CASE("rm refuses a version being pulled; a pull waiting on rm's lock locks the new file",
          "[weights]") {
  TempDir tmp;
  testing::WriteModelDir(tmp.path / "src", {5000});
  REQUIRE(PublishModel(tmp.path / "src", tmp.path / "c", "tiny", "v1", {.chunk_bytes = 4096}).ok());
  {
    auto pulling = VersionLock::Acquire(tmp.path / "c", "tiny", "v1", /*wait=*/true);
    REQUIRE(pulling.ok());
    absl::Status rm = RemoveModel(tmp.path / "c", "tiny", "v1");
    CHECK(absl::IsFailedPrecondition(rm));
    CHECK_THAT(std::string(rm.message()), Catch::Contains("being pulled"));
    CHECK(LoadManifest(tmp.path / "c", "tiny", "v1").ok());
  }
  auto rm_lock = VersionLock::Acquire(tmp.path / "c", "tiny", "v1", /*wait=*/false);
  REQUIRE(rm_lock.ok());
  std::atomic<bool> locked{false};
  std::thread waiter([&] {
    auto lock = VersionLock::Acquire(tmp.path / "c", "tiny", "v1", /*wait=*/true);
    locked = lock.ok();
    // It holds the file the path names, so a third taker is refused.
    CHECK(absl::IsFailedPrecondition(
        VersionLock::Acquire(tmp.path / "c", "tiny", "v1", /*wait=*/false).status()));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(locked);
  rm_lock->RemoveFile();
  { auto released = std::move(*rm_lock); }
  waiter.join();
  CHECK(locked);
}

TEST_CASE("A damaged manifest in a store is DATA_LOSS, not a bad request", "[weights]") {
  TempDir tmp;
  testing::WriteModelDir(tmp.path / "src", {5000});
  REQUIRE(PublishModel(tmp.path / "src", tmp.path / "c", "tiny", "v1", {.chunk_bytes = 4096}).ok());
  std::ofstream(ManifestPath(tmp.path / "c", "tiny", "v1")) << "{\"files\": [";
  CHECK(absl::IsDataLoss(LoadManifest(tmp.path / "c", "tiny", "v1").status()));
}

}  // namespace
}  // namespace exa::weights
