#include "weights/model_cache.h"

#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "cluster/model_names.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::weights {
namespace {

fs::path MarkerPath(const fs::path& root, const Manifest& m, const FileEntry& f) {
  fs::path p = StateDir(root, m.name, m.version) / f.path;
  p += ".ok";
  return p;
}

struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

absl::StatusOr<FileStamp> Stamp(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  return FileStamp{static_cast<uint64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

}  // namespace

absl::Status WriteVerifiedMarker(const fs::path& root, const Manifest& m, const FileEntry& f) {
  EXA_ASSIGN_OR_RETURN(FileStamp stamp, Stamp(ModelDir(root, m.name, m.version) / f.path));
  nlohmann::json j = {
      {"size_bytes", stamp.size}, {"mtime_ns", stamp.mtime_ns}, {"sha256", f.sha256}};
  return WriteFileAtomically(MarkerPath(root, m, f), j.dump() + "\n");
}

bool HasVerifiedMarker(const fs::path& root, const Manifest& m, const FileEntry& f) {
  auto stamp = Stamp(ModelDir(root, m.name, m.version) / f.path);
  if (!stamp.ok() || stamp->size != f.size_bytes) return false;
  auto text = ReadSmallFile(MarkerPath(root, m, f), 4096);
  if (!text.ok()) return false;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return false;
  return j.value("size_bytes", uint64_t{0}) == stamp->size &&
         j.value("mtime_ns", int64_t{-1}) == stamp->mtime_ns &&
         j.value("sha256", std::string()) == f.sha256;
}

std::vector<CachedModel> ListCachedModels(const fs::path& root) {
  std::vector<CachedModel> out;
  std::error_code ec;
  for (const ModelId& id : ListModelIds(root)) {
    auto m = LoadManifest(root, id.name, id.version);
    if (!m.ok()) continue;
    CachedModel c{id.name, id.version, ManifestDigest(*m)};
    c.total_bytes = m->TotalBytes();
    for (const FileEntry& f : m->files) {
      if (HasVerifiedMarker(root, *m, f)) c.verified_bytes += f.size_bytes;
    }
    c.complete = c.verified_bytes == c.total_bytes;
    c.pinned = fs::exists(PinPath(root, id.name, id.version), ec);
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<VerifyReport> VerifyModel(const fs::path& root, const std::string& name,
                                         const std::string& version, int threads) {
  EXA_ASSIGN_OR_RETURN(Manifest m, LoadManifest(root, name, version));
  VerifyReport report;
  std::mutex mu;
  std::atomic<size_t> next{0};
  absl::Status failure;
  auto work = [&] {
    for (size_t i = next++; i < m.files.size(); i = next++) {
      const FileEntry& f = m.files[i];
      fs::path path = ModelDir(root, name, version) / f.path;
      auto digest = HashFile(path, m.chunk_bytes);
      std::vector<BadChunk> bad;
      if (!digest.ok()) {
        bad.push_back({f.path, -1, std::string(digest.status().message())});
      } else if (digest->size_bytes != f.size_bytes) {
        bad.push_back(
            {f.path, -1, StrCat(digest->size_bytes, " bytes, the manifest says ", f.size_bytes)});
      } else {
        for (size_t c = 0; c < f.chunks.size(); ++c) {
          if (digest->chunk_sha256[c] != f.chunks[c].sha256) {
            bad.push_back(
                {f.path, static_cast<int64_t>(c),
                 StrCat("sha256 ", digest->chunk_sha256[c], ", expected ", f.chunks[c].sha256)});
          }
        }
        if (bad.empty() && digest->sha256 != f.sha256) {
          bad.push_back(
              {f.path, -1, StrCat("file sha256 ", digest->sha256, ", expected ", f.sha256)});
        }
      }
      absl::Status marker;
      if (bad.empty()) {
        marker = WriteVerifiedMarker(root, m, f);
      } else {
        std::error_code ec;
        fs::path p = StateDir(root, name, version) / f.path;
        p += ".ok";
        fs::remove(p, ec);
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!marker.ok() && failure.ok()) failure = marker;
      ++report.files;
      report.chunks += f.chunks.size();
      report.bytes += digest.ok() ? digest->size_bytes : 0;
      for (auto& b : bad) report.bad.push_back(std::move(b));
    }
  };
  threads = std::max(1, std::min<int>(threads, static_cast<int>(m.files.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  EXA_RETURN_IF_ERROR(failure);
  std::sort(report.bad.begin(), report.bad.end(), [](const BadChunk& a, const BadChunk& b) {
    return std::tie(a.path, a.chunk_index) < std::tie(b.path, b.chunk_index);
  });
  return report;
}

absl::Status RemoveModel(const fs::path& root, const std::string& name,
                         const std::string& version) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", name));
  EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", version));
  std::error_code ec;
  if (!fs::exists(ManifestPath(root, name, version), ec) &&
      !fs::exists(ModelDir(root, name, version), ec)) {
    return absl::NotFoundError(StrCat("model ", name, "@", version, " is not in ", root.string()));
  }
  // Not under a pull: it would go on writing, and mark verified, files removed here.
  EXA_ASSIGN_OR_RETURN(VersionLock lock, VersionLock::Acquire(root, name, version, /*wait=*/false));
  // The manifest first: a crash half-way leaves files no listing shows, never a listed model
  // with files missing.
  for (const fs::path& p : {ManifestPath(root, name, version), PinPath(root, name, version),
                            StateDir(root, name, version), ModelDir(root, name, version)}) {
    fs::remove_all(p, ec);
    if (ec) return ErrnoStatus(ec.value(), "remove", p);
  }
  lock.RemoveFile();
  fs::remove(root / name, ec);  // only when empty
  return absl::OkStatus();
}

absl::Status SetPinned(const fs::path& root, const std::string& name, const std::string& version,
                       bool pinned) {
  EXA_RETURN_IF_ERROR(LoadManifest(root, name, version).status());
  fs::path pin = PinPath(root, name, version);
  if (pinned) return WriteFileAtomically(pin, "pinned\n");
  std::error_code ec;
  fs::remove(pin, ec);
  if (ec) return ErrnoStatus(ec.value(), "remove", pin);
  return absl::OkStatus();
}

absl::StatusOr<fs::path> VerifiedModelDir(const fs::path& root, const std::string& name,
                                          const std::string& version) {
  EXA_ASSIGN_OR_RETURN(Manifest m, LoadManifest(root, name, version));
  for (const FileEntry& f : m.files) {
    if (!HasVerifiedMarker(root, m, f)) {
      return absl::FailedPreconditionError(StrCat("model ", name, "@", version, " file \"", f.path,
                                                  "\" is not verified in ", root.string(),
                                                  " (pull it, or run model verify)"));
    }
  }
  return ModelDir(root, name, version);
}

}  // namespace exa::weights
