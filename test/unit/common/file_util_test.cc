#include "common/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

namespace exa {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("WriteFileAtomically replaces the file whole, with its mode, and leaves no temp") {
  std::string dir = (std::filesystem::temp_directory_path() / "exa-file-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  const std::string path = dir + "/f";
  REQUIRE(WriteFileAtomically(path, "one\n", 0600).ok());
  REQUIRE(WriteFileAtomically(path, "two\n", 0600).ok());
  CHECK(Read(path) == "two\n");
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  absl::Status missing = WriteFileAtomically(dir + "/no/such/dir/f", "x");
  CHECK(missing.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(missing.message()), Catch::Contains("no/such/dir/f.tmp"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace exa
