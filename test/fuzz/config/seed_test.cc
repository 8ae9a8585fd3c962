// The config corpus's seeds (real config files, environment dumps and refused inputs) load or
// fail as their names say, and loading a seed as a file (the daemon's --config path) agrees with
// loading its text. corpus_runner.cc runs them and their mutations through the fuzz target.
#include <filesystem>

#include <catch2/catch.hpp>

#include "daemon_like_schema.h"
#include "fuzz_corpus_params.h"
#include "support/fuzz_corpus.h"

namespace exa::config {
namespace {

absl::Status LoadEnvironmentLines(Schema& schema, const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (char c : text + "\n") {
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    lines.push_back(std::exchange(line, ""));
  }
  std::vector<const char*> envp;
  for (const std::string& l : lines) envp.push_back(l.c_str());
  envp.push_back(nullptr);
  return schema.LoadEnvironment(envp.data());
}

TEST_CASE("Config fuzz seeds load or fail as their names say", "[fuzz]") {
  const std::string dir = exa::testing::fuzz_params::kCorpusDir;
  int files = 0, valid = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(dir)) {
    INFO(name);
    ++files;
    fuzz::DaemonLikeOptions from_text_options, from_file_options;
    Schema from_text, from_file;
    fuzz::RegisterDaemonLike(from_text, &from_text_options);
    fuzz::RegisterDaemonLike(from_file, &from_file_options);
    const absl::Status text_status = from_text.LoadYamlString(seed, "seed");
    INFO(text_status.message());
    CHECK(from_file.LoadYamlFile(dir + "/" + name).ok() == text_status.ok());
    if (name.rfind("valid_", 0) == 0) {
      CHECK(text_status.ok());
      ++valid;
    } else if (name.rfind("bad_", 0) == 0) {
      CHECK_FALSE(text_status.ok());
    } else if (name.rfind("env_", 0) == 0) {
      fuzz::DaemonLikeOptions env_options;
      Schema env;
      fuzz::RegisterDaemonLike(env, &env_options);
      CHECK(LoadEnvironmentLines(env, seed).ok());
      ++valid;
    }
  }
  CHECK(files >= 8);
  CHECK(valid >= 4);
}

}  // namespace
}  // namespace exa::config
