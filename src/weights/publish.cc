#include "weights/publish.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

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
  EXA_RETURN_IF_ERROR(ValidateName("model name", name));
  EXA_RETURN_IF_ERROR(ValidateName("model version", version));
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

absl::StatusOr<Manifest> PublishModel(const fs::path& dir, const fs::path& origin,
                                      std::string_view name, std::string_view version,
                                      const ComputeOptions& options) {
  EXA_RETURN_IF_ERROR(ValidateName("model name", name));
  EXA_RETURN_IF_ERROR(ValidateName("model version", version));
  std::error_code ec;
  fs::path target = ModelDir(origin, name, version);
  bool in_place = fs::exists(target, ec) && fs::equivalent(dir, target, ec);
  auto existing = LoadManifest(origin, name, version);
  if (!in_place) {
    if (existing.ok() || fs::exists(target, ec)) {
      return absl::AlreadyExistsError(StrCat("model ", name, ":", version, " already exists in ",
                                             origin.string(), "; versions are immutable"));
    }
    fs::path staging = target;
    staging += ".publishing";
    fs::remove_all(staging, ec);
    fs::create_directories(staging.parent_path(), ec);
    fs::copy(dir, staging, fs::copy_options::recursive, ec);
    if (ec) {
      fs::remove_all(staging, ec);
      return ErrnoStatus(ec.value(), "copy into", staging);
    }
    fs::rename(staging, target, ec);
    if (ec) return ErrnoStatus(ec.value(), "rename into", target);
  }
  EXA_ASSIGN_OR_RETURN(Manifest m, ComputeManifest(target, name, version, options));
  if (existing.ok()) {
    if (ManifestDigest(*existing) != ManifestDigest(m)) {
      return absl::AlreadyExistsError(StrCat("model ", name, ":", version,
                                             " is published with other content; versions are "
                                             "immutable"));
    }
    return m;
  }
  EXA_RETURN_IF_ERROR(SaveManifest(origin, m));
  return m;
}

}  // namespace exa::weights
