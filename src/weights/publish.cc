#include "weights/publish.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "cluster/model_names.h"
#include "common/status.h"
#include "common/strings.h"
#include "weights/layout.h"

namespace exa::weights {

absl::StatusOr<Manifest> ComputeManifest(const fs::path& dir, std::string_view name,
                                         std::string_view version, const ComputeOptions& options) {
  Manifest m;
  m.name = std::string(name);
  m.version = std::string(version);
  m.chunk_bytes = options.chunk_bytes;
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", name));
  EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", version));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(StrCat(dir.string(), ": not a directory"));
  }
  auto it = fs::recursive_directory_iterator(dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "list", dir);
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return ErrnoStatus(ec.value(), "list", dir);
    if (it->path().filename().string().starts_with(".")) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    FileEntry f;
    f.path = it->path().lexically_relative(dir).generic_string();
    EXA_RETURN_IF_ERROR(ValidateRelativePath(f.path));
    m.files.push_back(std::move(f));
  }
  if (m.files.empty()) {
    return absl::InvalidArgumentError(StrCat(dir.string(), ": no files to publish"));
  }
  std::sort(m.files.begin(), m.files.end(),
            [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
  int threads = options.threads > 0
                    ? options.threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, static_cast<int>(std::max<size_t>(1, m.files.size())));
  std::atomic<size_t> next{0};
  std::vector<absl::Status> errors(m.files.size());
  auto work = [&] {
    for (size_t i = next++; i < m.files.size(); i = next++) {
      FileEntry& f = m.files[i];
      auto digest = HashFile(dir / f.path, m.chunk_bytes);
      if (!digest.ok()) {
        errors[i] = digest.status();
        continue;
      }
      f.size_bytes = digest->size_bytes;
      f.sha256 = digest->sha256;
      for (size_t c = 0; c < digest->chunk_sha256.size(); ++c) {
        uint64_t offset = c * m.chunk_bytes;
        f.chunks.push_back(
            {offset, std::min(m.chunk_bytes, f.size_bytes - offset), digest->chunk_sha256[c]});
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const absl::Status& s : errors) EXA_RETURN_IF_ERROR(s);
  EXA_RETURN_IF_ERROR(ValidateManifest(m));
  return m;
}

namespace {

// Refuses what cannot be published as a model before anything is copied: a --dir that is not a
// directory, entries other than files and directories (FIFOs, sockets, devices, dangling
// links), and directories nested deeper than any model's (a symlink loop: links are followed,
// as in Hugging Face snapshot directories, whose files link into a blob store).
absl::Status CheckSource(const fs::path& dir) {
  constexpr int kMaxDepth = 32;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(StrCat(dir.string(), ": not a directory"));
  }
  auto it =
      fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
  if (ec) return ErrnoStatus(ec.value(), "list", dir);
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return ErrnoStatus(ec.value(), "list", dir);
    if (it.depth() > kMaxDepth) {
      return absl::InvalidArgumentError(StrCat(it->path().string(), ": nested more than ",
                                               kMaxDepth, " directories deep (a symlink loop?)"));
    }
    const fs::file_status st = it->status(ec);  // through links
    if (ec) return ErrnoStatus(ec.value(), "stat", it->path());
    if (!fs::is_regular_file(st) && !fs::is_directory(st)) {
      return absl::InvalidArgumentError(
          StrCat(it->path().string(),
                 ": not a regular file or directory (a model holds only "
                 "those)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Manifest> PublishModel(const fs::path& dir, const fs::path& origin,
                                      std::string_view name, std::string_view version,
                                      const ComputeOptions& options) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", name));
  EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", version));
  std::error_code ec;
  fs::path target = ModelDir(origin, name, version);
  bool in_place = fs::exists(target, ec) && fs::equivalent(dir, target, ec);
  auto existing = LoadManifest(origin, name, version);
  if (in_place) {
    // Already in the origin (published where it lies): hash it there.
    EXA_ASSIGN_OR_RETURN(Manifest m, ComputeManifest(target, name, version, options));
    if (!existing.ok()) {
      EXA_RETURN_IF_ERROR(SaveManifest(origin, m));
    } else if (ManifestDigest(*existing) != ManifestDigest(m)) {
      return absl::AlreadyExistsError(StrCat("model ", name, "@", version,
                                             " is published with other content; versions are "
                                             "immutable"));
    }
    return m;
  }
  if (existing.ok() || fs::exists(target, ec)) {
    return absl::AlreadyExistsError(StrCat("model ", name, "@", version, " already exists in ",
                                           origin.string(), "; versions are immutable"));
  }
  EXA_RETURN_IF_ERROR(CheckSource(dir));
  // Copied and hashed under a staging name the version check keeps apart from every version's
  // own files; it becomes the version's directory only once its manifest is computed, so a
  // failed publish leaves nothing a retry would take for a published version.
  fs::path staging = target;
  staging += cluster::kPublishingSuffix;
  fs::remove_all(staging, ec);
  fs::create_directories(staging.parent_path(), ec);
  if (ec) return ErrnoStatus(ec.value(), "create", staging.parent_path());
  fs::copy(dir, staging, fs::copy_options::recursive, ec);
  if (ec) {
    const std::error_code copy_error = ec;
    fs::remove_all(staging, ec);
    return ErrnoStatus(copy_error.value(), StrCat("copy ", dir.string(), " into"), staging);
  }
  absl::StatusOr<Manifest> m = ComputeManifest(staging, name, version, options);
  if (m.ok()) {
    fs::rename(staging, target, ec);
    if (ec) m = ErrnoStatus(ec.value(), "rename into", target);
  }
  if (!m.ok()) {
    fs::remove_all(staging, ec);
    return m.status();
  }
  // The manifest last: until it is written the version is not listed, and a failure to write
  // it takes the directory back out.
  if (absl::Status saved = SaveManifest(origin, *m); !saved.ok()) {
    fs::remove_all(target, ec);
    return saved;
  }
  return m;
}

}  // namespace exa::weights
