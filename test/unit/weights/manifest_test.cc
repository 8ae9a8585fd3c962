// Manifests: the validator refuses every malformed or malicious manifest with an error naming
// the field, the JSON form round-trips, and its digest names the content.
#include <catch2/catch.hpp>

#include "cluster/model_names.h"
#include "common/strings.h"
#include "weights/layout.h"
#include "weights/manifest.h"
#include "weights/sha256.h"

namespace exa::weights {
namespace {

const std::string kSha(64, 'a');

Manifest Sample() {
  Manifest m;
  m.name = "llama-13b";
  m.version = "v1";
  m.chunk_bytes = 4096;
  m.files.push_back({"config.json", 10, kSha, {{0, 10, kSha}}});
  m.files.push_back({"model-00001-of-00002.safetensors",
                     10000,
                     kSha,
                     {{0, 4096, kSha}, {4096, 4096, kSha}, {8192, 1808, kSha}}});
  m.files.push_back({"sub/tokenizer.json", 0, kSha, {}});
  return m;
}

std::string ErrorOf(const Manifest& m) { return std::string(ValidateManifest(m).message()); }

TEST_CASE("SHA-256 matches the FIPS 180-2 test vector", "[weights]") {
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  CHECK(h.FinalHex() == Sha256Hex("abc"));
  CHECK(IsSha256Hex(Sha256Hex("")));
  CHECK_FALSE(IsSha256Hex(std::string(64, 'A')));
}

TEST_CASE("A well-formed manifest validates and round-trips through JSON", "[weights]") {
  Manifest m = Sample();
  REQUIRE(ValidateManifest(m).ok());
  auto parsed = ParseManifestJson(ManifestToJson(m));
  REQUIRE(parsed.ok());
  CHECK(*parsed == m);
  CHECK(ManifestDigest(*parsed) == ManifestDigest(m));
  CHECK(m.TotalBytes() == 10010);
  CHECK(m.TotalChunks() == 4);
  CHECK(m.FindFile("sub/tokenizer.json") != nullptr);
  CHECK(m.FindFile("nope") == nullptr);
}

TEST_CASE("The digest changes with any content and a wrong digest is refused", "[weights]") {
  Manifest m = Sample();
  Manifest other = m;
  other.files[0].chunks[0].sha256 = std::string(64, 'b');
  CHECK(ManifestDigest(m) != ManifestDigest(other));
  std::string json = ManifestToJson(m);
  std::string digest = ManifestDigest(m);
  json.replace(json.find(digest), 64, ManifestDigest(other));
  auto parsed = ParseManifestJson(json);
  REQUIRE_FALSE(parsed.ok());
  CHECK(absl::IsDataLoss(parsed.status()));
}

TEST_CASE("Path traversal and absolute paths are refused", "[weights]") {
  for (const char* bad : {"../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "./a", "a/.", "",
                          "a\\b", "weights.exa-part", "a/\x01"}) {
    Manifest m = Sample();
    m.files[0].path = bad;
    std::sort(m.files.begin(), m.files.end(),
              [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    INFO(bad);
    std::string err = ErrorOf(m);
    CHECK(err.find("path") != std::string::npos);
  }
  CHECK(ValidateRelativePath(std::string(kMaxPathBytes + 1, 'a')).message().find("1-1024") !=
        std::string::npos);
  CHECK(ValidateRelativePath(".gitattributes").ok());
  CHECK(ValidateRelativePath("a..b/c").ok());
}

TEST_CASE("Duplicate, unsorted and file-as-directory paths are refused", "[weights]") {
  Manifest m = Sample();
  m.files[1].path = "config.json";
  CHECK_THAT(ErrorOf(m), Catch::Contains("duplicate path"));
  m = Sample();
  std::swap(m.files[0], m.files[1]);
  CHECK_THAT(ErrorOf(m), Catch::Contains("sorted"));
  m = Sample();
  m.files[2].path = "config.json/x";
  std::sort(m.files.begin(), m.files.end(),
            [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
  CHECK_THAT(ErrorOf(m), Catch::Contains("is a file, not a directory"));
  // ... also when another file sorts between them ("a" < "a-b" < "a/b"), and deeper down.
  for (const char* between : {"config.json-b", "config.json.x"}) {
    m = Sample();
    m.files.push_back(m.files[0]);
    m.files[2].path = between;
    m.files[3].path = "config.json/deeper/x";
    std::sort(m.files.begin(), m.files.end(),
              [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    CHECK_THAT(ErrorOf(m), Catch::Contains("\"config.json\" is a file, not a directory"));
  }
}

TEST_CASE("Versions may not end in the layout's suffixes for files beside a version", "[weights]") {
  for (const char* v :
       {"v1.publishing", "v1.pinned", "v1.state", "v1.lock", "v1.manifest.json", "v1.tmp"}) {
    INFO(v);
    CHECK(cluster::ValidateModelVersion("version", v).code() == absl::StatusCode::kInvalidArgument);
    CHECK(cluster::ValidateModelName("name", v).ok());  // as model names they are fine
  }
  CHECK(cluster::ValidateModelVersion("version", "v1.pinnedx").ok());
  Manifest m = Sample();
  m.version = "v2.pinned";
  CHECK_THAT(ErrorOf(m), Catch::Contains("must not end in \".pinned\""));
}

TEST_CASE("Absurd sizes and chunk counts are refused", "[weights]") {
  Manifest m = Sample();
  m.files[0].size_bytes = kMaxFileBytes + 1;
  CHECK_THAT(ErrorOf(m), Catch::Contains("over the"));
  m = Sample();
  m.chunk_bytes = 1;
  CHECK_THAT(ErrorOf(m), Catch::Contains("chunk_bytes 1: expected"));
  m = Sample();
  m.files[1].chunks.pop_back();
  CHECK_THAT(ErrorOf(m), Catch::Contains("2 chunks, expected 3"));
  m = Sample();
  m.files[1].chunks[1].offset = 4095;
  CHECK_THAT(ErrorOf(m), Catch::Contains("chunk 1: offset 4095"));
  m = Sample();
  m.files[1].chunks[2].size_bytes = 4096;
  CHECK_THAT(ErrorOf(m), Catch::Contains("expected offset 8192 size 1808"));
  m = Sample();
  m.files[0].chunks[0].sha256 = "XYZ";
  CHECK_THAT(ErrorOf(m), Catch::Contains("not 64 lowercase hex"));
  m = Sample();
  m.name = "../x";
  CHECK_THAT(ErrorOf(m), Catch::Contains("name \"../x\""));
}

TEST_CASE("Malformed JSON gets an error naming the field", "[weights]") {
  CHECK_THAT(std::string(ParseManifestJson("{").status().message()), Catch::Contains("JSON"));
  CHECK_THAT(std::string(ParseManifestJson("[]").status().message()),
             Catch::Contains("JSON object"));
  CHECK_THAT(std::string(ParseManifestJson(R"({"format":"x"})").status().message()),
             Catch::Contains("manifest.format"));
  std::string json = ManifestToJson(Sample());
  std::string no_size = json;
  no_size.replace(no_size.find("\"size_bytes\":10}"), 16, "\"size_bytes\":-1}");
  CHECK_THAT(std::string(ParseManifestJson(no_size).status().message()),
             Catch::Contains("size_bytes: expected a non-negative integer"));
  CHECK_THAT(std::string(ParseManifestJson(std::string(100, '[')).status().message()),
             Catch::Contains("nested"));
}

TEST_CASE("Model specs and version ordering", "[weights]") {
  auto spec = ParseModelSpec("llama-13b:v2");
  REQUIRE(spec.ok());
  CHECK(spec->name == "llama-13b");
  CHECK(spec->version == "v2");
  CHECK(ParseModelSpec("llama").ok());
  CHECK_FALSE(ParseModelSpec("../x").ok());
  CHECK_FALSE(ParseModelSpec("a:").ok());
  // NAME@VERSION, as replica ids and the API print it, reads the same as NAME:VERSION.
  auto at = ParseModelSpec("llama-13b@v2");
  REQUIRE(at.ok());
  CHECK(at->name == "llama-13b");
  CHECK(at->version == "v2");
  CHECK_FALSE(ParseModelSpec("a@").ok());
  CHECK(VersionLess("v9", "v10"));
  CHECK_FALSE(VersionLess("v10", "v9"));
  CHECK(VersionLess("1.2", "1.10"));
  CHECK(VersionLess("v1", "v1.1"));
  CHECK(*NewestVersion({{"m", "v9"}, {"m", "v10"}, {"n", "v99"}}, "m") == "v10");
  CHECK(absl::IsNotFound(NewestVersion({}, "m").status()));
}

}  // namespace
}  // namespace exa::weights
