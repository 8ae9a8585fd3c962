#include "weights/manifest.h"

#include <algorithm>
#include <set>

#include "cluster/model_names.h"
#include "common/chars.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"
#include "weights/sha256.h"

namespace exa::weights {
namespace {

constexpr std::string_view kFormat = "exaserve.manifest.v1";
constexpr int kMaxJsonDepth = 8;  // the format nests 4 deep; more is not a manifest

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

absl::Status ValidateChunks(const FileEntry& f, uint64_t chunk_bytes) {
  uint64_t expected = (f.size_bytes + chunk_bytes - 1) / chunk_bytes;
  if (f.chunks.size() != expected) {
    return Invalid(StrCat("file \"", f.path, "\": ", f.chunks.size(), " chunks, expected ",
                          expected, " for ", f.size_bytes, " bytes in chunks of ", chunk_bytes));
  }
  for (size_t i = 0; i < f.chunks.size(); ++i) {
    const ChunkRef& c = f.chunks[i];
    uint64_t offset = i * chunk_bytes;
    uint64_t size = std::min(chunk_bytes, f.size_bytes - offset);
    if (c.offset != offset || c.size_bytes != size) {
      return Invalid(StrCat("file \"", f.path, "\" chunk ", i, ": offset ", c.offset, " size ",
                            c.size_bytes, ", expected offset ", offset, " size ", size));
    }
    if (!IsSha256Hex(c.sha256)) {
      return Invalid(StrCat("file \"", f.path, "\" chunk ", i, ": sha256 \"",
                            c.sha256.substr(0, 80), "\" is not 64 lowercase hex digits"));
    }
  }
  return absl::OkStatus();
}

// Depth of [ and { nesting outside strings; nlohmann would otherwise build any depth.
int JsonDepth(std::string_view json) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

nlohmann::json ToJsonWithoutDigest(const Manifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const FileEntry& f : m.files) {
    nlohmann::json chunks = nlohmann::json::array();
    for (const ChunkRef& c : f.chunks) {
      chunks.push_back({{"offset", c.offset}, {"size_bytes", c.size_bytes}, {"sha256", c.sha256}});
    }
    files.push_back({{"path", f.path},
                     {"size_bytes", f.size_bytes},
                     {"sha256", f.sha256},
                     {"chunks", std::move(chunks)}});
  }
  return {{"format", kFormat},
          {"name", m.name},
          {"version", m.version},
          {"chunk_bytes", m.chunk_bytes},
          {"files", std::move(files)}};
}

// Typed field access that names the field on error (no exceptions escape).
template <typename T>
absl::StatusOr<T> Field(const nlohmann::json& obj, std::string_view where, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return Invalid(StrCat(where, ".", key, ": missing"));
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return Invalid(StrCat(where, ".", key, ": expected a string"));
    return it->template get<std::string>();
  } else {
    if (!it->is_number_unsigned()) {
      return Invalid(StrCat(where, ".", key, ": expected a non-negative integer"));
    }
    return it->template get<uint64_t>();
  }
}

absl::StatusOr<FileEntry> ParseFile(const nlohmann::json& j, size_t index) {
  std::string where = StrCat("files[", index, "]");
  if (!j.is_object()) return Invalid(StrCat(where, ": expected an object"));
  FileEntry f;
  EXA_ASSIGN_OR_RETURN(f.path, Field<std::string>(j, where, "path"));
  EXA_ASSIGN_OR_RETURN(f.size_bytes, Field<uint64_t>(j, where, "size_bytes"));
  EXA_ASSIGN_OR_RETURN(f.sha256, Field<std::string>(j, where, "sha256"));
  auto chunks = j.find("chunks");
  if (chunks == j.end() || !chunks->is_array()) {
    return Invalid(StrCat(where, ".chunks: expected an array"));
  }
  if (chunks->size() > kMaxChunks) {
    return Invalid(StrCat(where, ".chunks: ", chunks->size(), " chunks, at most ", kMaxChunks));
  }
  for (size_t i = 0; i < chunks->size(); ++i) {
    const nlohmann::json& c = (*chunks)[i];
    std::string cw = StrCat(where, ".chunks[", i, "]");
    if (!c.is_object()) return Invalid(StrCat(cw, ": expected an object"));
    ChunkRef ref;
    EXA_ASSIGN_OR_RETURN(ref.offset, Field<uint64_t>(c, cw, "offset"));
    EXA_ASSIGN_OR_RETURN(ref.size_bytes, Field<uint64_t>(c, cw, "size_bytes"));
    EXA_ASSIGN_OR_RETURN(ref.sha256, Field<std::string>(c, cw, "sha256"));
    f.chunks.push_back(std::move(ref));
  }
  return f;
}

}  // namespace

uint64_t Manifest::TotalBytes() const {
  uint64_t total = 0;
  for (const FileEntry& f : files) total += f.size_bytes;
  return total;
}

uint64_t Manifest::TotalChunks() const {
  uint64_t total = 0;
  for (const FileEntry& f : files) total += f.chunks.size();
  return total;
}

const FileEntry* Manifest::FindFile(std::string_view path) const {
  auto it = std::lower_bound(files.begin(), files.end(), path,
                             [](const FileEntry& f, std::string_view p) { return f.path < p; });
  return it != files.end() && it->path == path ? &*it : nullptr;
}

absl::Status ValidateRelativePath(std::string_view path) {
  std::string shown(path.substr(0, 200));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  if (path.empty() || path.size() > kMaxPathBytes) {
    return Invalid(StrCat("path \"", shown, "\": expected 1-", kMaxPathBytes, " bytes"));
  }
  if (path.front() == '/') {
    return Invalid(StrCat("path \"", shown, "\": absolute paths are not allowed"));
  }
  for (char c : path) {
    if (IsAsciiControl(c) || c == '\\') {
      return Invalid(
          StrCat("path \"", shown, "\": control characters and backslashes are not allowed"));
    }
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return Invalid(StrCat("path \"", shown,
                            "\": empty, \".\" and \"..\" components are not allowed (the path "
                            "must stay inside the model directory)"));
    }
    start = end + 1;
  }
  if (path.size() >= kPartSuffix.size() &&
      path.substr(path.size() - kPartSuffix.size()) == kPartSuffix) {
    return Invalid(StrCat("path \"", shown, "\": the suffix ", kPartSuffix, " is reserved"));
  }
  return absl::OkStatus();
}

absl::Status ValidateManifest(const Manifest& m) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("name", m.name));
  EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("version", m.version));
  if (m.chunk_bytes < kMinChunkBytes || m.chunk_bytes > kMaxChunkBytes) {
    return Invalid(StrCat("chunk_bytes ", m.chunk_bytes, ": expected ", kMinChunkBytes, " to ",
                          kMaxChunkBytes));
  }
  if (m.files.size() > kMaxFiles) {
    return Invalid(StrCat("files: ", m.files.size(), " entries, at most ", kMaxFiles));
  }
  uint64_t total = 0, chunks = 0;
  for (size_t i = 0; i < m.files.size(); ++i) {
    const FileEntry& f = m.files[i];
    EXA_RETURN_IF_ERROR(Annotate(ValidateRelativePath(f.path), StrCat("files[", i, "]")));
    if (i > 0 && !(m.files[i - 1].path < f.path)) {
      return Invalid(StrCat(
          "files[", i, "] \"", f.path, "\": ",
          m.files[i - 1].path == f.path ? "duplicate path" : "files must be sorted by path"));
    }
    // "a" as a file and "a/b" as another cannot both exist on disk, wherever they sort ("a-b"
    // comes between them). A directory of f sorts before it, among the files checked sorted.
    for (size_t slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1)) {
      const std::string_view dir(f.path.data(), slash);
      auto files_before = m.files.begin() + static_cast<std::ptrdiff_t>(i);
      auto found = std::lower_bound(
          m.files.begin(), files_before, dir,
          [](const FileEntry& e, std::string_view p) { return std::string_view(e.path) < p; });
      if (found != files_before && found->path == dir) {
        return Invalid(
            StrCat("files[", i, "] \"", f.path, "\": \"", dir, "\" is a file, not a directory"));
      }
    }
    if (f.size_bytes > kMaxFileBytes) {
      return Invalid(StrCat("file \"", f.path, "\": size_bytes ", f.size_bytes, " is over the ",
                            kMaxFileBytes, " limit"));
    }
    if (!IsSha256Hex(f.sha256)) {
      return Invalid(StrCat("file \"", f.path, "\": sha256 \"", f.sha256.substr(0, 80),
                            "\" is not 64 lowercase hex digits"));
    }
    total += f.size_bytes;
    chunks += f.chunks.size();
    if (total > kMaxModelBytes) {
      return Invalid(StrCat("files: total size over the ", kMaxModelBytes, " byte limit"));
    }
    if (chunks > kMaxChunks) {
      return Invalid(StrCat("files: more than ", kMaxChunks, " chunks in total"));
    }
    EXA_RETURN_IF_ERROR(ValidateChunks(f, m.chunk_bytes));
  }
  return absl::OkStatus();
}

std::string ManifestDigest(const Manifest& m) { return Sha256Hex(ToJsonWithoutDigest(m).dump()); }

std::string ManifestToJson(const Manifest& m) {
  nlohmann::json j = ToJsonWithoutDigest(m);
  std::string digest = Sha256Hex(j.dump());
  j["digest"] = digest;
  return j.dump();
}

absl::StatusOr<Manifest> ParseManifestJson(std::string_view text) {
  if (text.size() > kMaxManifestJsonBytes) {
    return Invalid(StrCat("manifest: ", text.size(), " bytes, at most ", kMaxManifestJsonBytes));
  }
  if (JsonDepth(text) > kMaxJsonDepth) {
    return Invalid(StrCat("manifest: JSON nested deeper than ", kMaxJsonDepth));
  }
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid("manifest: not valid JSON");
  if (!j.is_object()) return Invalid("manifest: expected a JSON object");
  Manifest m;
  EXA_ASSIGN_OR_RETURN(std::string format, Field<std::string>(j, "manifest", "format"));
  if (format != kFormat) {
    return Invalid(StrCat("manifest.format \"", format.substr(0, 80), "\": expected ", kFormat));
  }
  EXA_ASSIGN_OR_RETURN(m.name, Field<std::string>(j, "manifest", "name"));
  EXA_ASSIGN_OR_RETURN(m.version, Field<std::string>(j, "manifest", "version"));
  EXA_ASSIGN_OR_RETURN(m.chunk_bytes, Field<uint64_t>(j, "manifest", "chunk_bytes"));
  auto files = j.find("files");
  if (files == j.end() || !files->is_array()) return Invalid("manifest.files: expected an array");
  if (files->size() > kMaxFiles) {
    return Invalid(StrCat("manifest.files: ", files->size(), " entries, at most ", kMaxFiles));
  }
  for (size_t i = 0; i < files->size(); ++i) {
    EXA_ASSIGN_OR_RETURN(FileEntry f, ParseFile((*files)[i], i));
    m.files.push_back(std::move(f));
  }
  EXA_RETURN_IF_ERROR(ValidateManifest(m));
  if (auto d = j.find("digest"); d != j.end()) {
    if (!d->is_string() || d->get<std::string>() != ManifestDigest(m)) {
      return absl::DataLossError("manifest.digest: does not match the manifest's content");
    }
  }
  return m;
}

absl::StatusOr<ModelSpec> ParseModelSpec(std::string_view text) {
  ModelSpec spec;
  // NAME@VERSION as the API and replica ids print it; NAME:VERSION accepted as well.
  size_t colon = text.find_first_of("@:");
  spec.name = std::string(text.substr(0, colon));
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", spec.name));
  if (colon != std::string_view::npos) {
    spec.version = std::string(text.substr(colon + 1));
    EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", spec.version));
  }
  return spec;
}

}  // namespace exa::weights
