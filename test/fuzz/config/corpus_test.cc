// The config fuzz target survives its seed corpus (real config files, environment dumps and
// refused inputs) and deterministic mutations of each; seeds load or fail as their names say,
// and loading a seed as a file (the daemon's --config path) agrees with loading its text.
#include <filesystem>

#include <catch2/catch.hpp>

#include "daemon_like_schema.h"
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

TEST_CASE("Config fuzz corpus and its mutations load or fail cleanly", "[fuzz]") {
  exa::testing::MutationOptions options;
  options.count = 300;
  options.specials = "{}[]:,-'\"#&*!|>\n =_.0123456789GiMsmh\\";
  int files = 0, valid = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(EXA_CONFIG_FUZZ_CORPUS_DIR)) {
    INFO(name);
    ++files;
    fuzz::DaemonLikeOptions from_text_options, from_file_options;
    Schema from_text, from_file;
    fuzz::RegisterDaemonLike(from_text, &from_text_options);
    fuzz::RegisterDaemonLike(from_file, &from_file_options);
    const absl::Status text_status = from_text.LoadYamlString(seed, "seed");
    INFO(text_status.message());
    const std::string path = std::string(EXA_CONFIG_FUZZ_CORPUS_DIR) + "/" + name;
    CHECK(from_file.LoadYamlFile(path).ok() == text_status.ok());
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
    exa::testing::RunFuzzInput(seed);
    for (const std::string& m :
         exa::testing::Mutations(seed, static_cast<uint32_t>(files), options)) {
      exa::testing::RunFuzzInput(m);
    }
  }
  CHECK(files >= 8);
  CHECK(valid >= 4);
}

}  // namespace
}  // namespace exa::config
