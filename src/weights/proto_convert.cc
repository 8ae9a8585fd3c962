#include "weights/proto_convert.h"

#include "common/status.h"
#include "common/strings.h"

namespace exa::weights {

void ToProto(const Manifest& m, exaserve::v1::Manifest* out) {
  out->mutable_model()->set_name(m.name);
  out->mutable_model()->set_version(m.version);
  out->mutable_model()->set_manifest_digest(ManifestDigest(m));
  out->set_chunk_bytes(m.chunk_bytes);
  for (const FileEntry& f : m.files) {
    auto* pf = out->add_files();
    pf->set_path(f.path);
    pf->set_size_bytes(f.size_bytes);
    pf->set_sha256(f.sha256);
    for (const ChunkRef& c : f.chunks) {
      auto* pc = pf->add_chunks();
      pc->set_offset(c.offset);
      pc->set_size_bytes(c.size_bytes);
      pc->set_sha256(c.sha256);
    }
  }
}

absl::StatusOr<Manifest> FromProto(const exaserve::v1::Manifest& p) {
  Manifest m;
  m.name = p.model().name();
  m.version = p.model().version();
  m.chunk_bytes = p.chunk_bytes();
  if (static_cast<size_t>(p.files_size()) > kMaxFiles) {
    return absl::InvalidArgumentError(
        StrCat("manifest.files: ", p.files_size(), " entries, at most ", kMaxFiles));
  }
  for (const auto& pf : p.files()) {
    FileEntry f;
    f.path = pf.path();
    f.size_bytes = pf.size_bytes();
    f.sha256 = pf.sha256();
    for (const auto& pc : pf.chunks())
      f.chunks.push_back({pc.offset(), pc.size_bytes(), pc.sha256()});
    m.files.push_back(std::move(f));
  }
  EXA_RETURN_IF_ERROR(ValidateManifest(m));
  if (!p.model().manifest_digest().empty() && p.model().manifest_digest() != ManifestDigest(m)) {
    return absl::DataLossError("manifest digest does not match the manifest's content");
  }
  return m;
}

}  // namespace exa::weights
