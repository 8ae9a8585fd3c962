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

TEST_CASE("ReadFile returns the whole file up to its bound, and names the path when it cannot") {
  std::string dir = (std::filesystem::temp_directory_path() / "exa-file-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  const std::string path = dir + "/f";
  const std::string contents(10000, 'x');  // past the first 4 KiB buffer
  REQUIRE(WriteFileAtomically(path, contents).ok());

  absl::StatusOr<std::string> read = ReadFile(path, contents.size());
  REQUIRE(read.ok());
  CHECK(*read == contents);

  absl::StatusOr<std::string> too_big = ReadFile(path, contents.size() - 1);
  CHECK(too_big.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(too_big.status().message()), Catch::Contains(path));
  CHECK_THAT(std::string(too_big.status().message()), Catch::Contains("9999 bytes"));

  absl::StatusOr<std::string> missing = ReadFile(dir + "/absent", 1 << 20);
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains(dir + "/absent"));

  absl::StatusOr<std::string> directory = ReadFile(dir, 1 << 20);
  CHECK(directory.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(directory.status().message()), Catch::Contains("is a directory"));

  REQUIRE(WriteFileAtomically(path, "").ok());
  CHECK(ReadFile(path, 0).value() == "");
  std::filesystem::remove_all(dir);
}

TEST_CASE("ReadFile stops at the bound on a file that never ends") {
  absl::StatusOr<std::string> endless = ReadFile("/dev/zero", 1 << 20);
  CHECK(endless.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(endless.status().message()), Catch::Contains("1048576 bytes"));
}

}  // namespace
}  // namespace exa
