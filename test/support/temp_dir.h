// A fresh directory under the system temp dir for one test, removed (with what it holds) when
// the object goes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace exa::testing {

struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "exa-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
};

}  // namespace exa::testing
