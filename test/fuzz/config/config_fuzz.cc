// libFuzzer entry for the daemon's config loading (config/schema.h): any bytes given as the
// --config file either fail with a Status or set the options, and what --print-config then
// prints loads back into a fresh schema as the same options (an operator saves it as a config).
// The same bytes read as environment lines ("EXASERVE_HTTP_MAX_BODY_BYTES=2Mi") go through
// LoadEnvironment with the same promise. Built with clang -fsanitize=fuzzer it fuzzes; in ctest
// its seed corpus and deterministic mutations run through corpus_test.cc.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "config/schema.h"
#include "daemon_like_schema.h"

namespace {

using exa::config::Schema;
using exa::config::fuzz::DaemonLikeOptions;
using exa::config::fuzz::RegisterDaemonLike;

void CheckPrintedConfigReloads(const Schema& loaded, const DaemonLikeOptions& loaded_options) {
  const std::string printed = loaded.ToYaml();
  DaemonLikeOptions options;
  Schema again;
  RegisterDaemonLike(again, &options);
  absl::Status status = again.LoadYamlString(printed, "--print-config");
  if (!status.ok() || !options.SameAs(loaded_options) || again.ToYaml() != printed) {
    std::fprintf(stderr, "--print-config output does not reload:\n%s\n%s\n", printed.c_str(),
                 status.ok() ? again.ToYaml().c_str() : std::string(status.message()).c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  {
    DaemonLikeOptions options;
    Schema schema;
    RegisterDaemonLike(schema, &options);
    if (schema.LoadYamlString(bytes, "fuzz.yaml").ok()) CheckPrintedConfigReloads(schema, options);
  }
  // The bytes as an environment: one "NAME=value" entry per line.
  std::vector<std::string> lines;
  for (size_t start = 0; start <= bytes.size();) {
    size_t end = std::min(bytes.find('\n', start), bytes.size());
    lines.emplace_back(bytes.substr(start, end - start));
    start = end + 1;
  }
  std::vector<const char*> envp;
  for (const std::string& line : lines) envp.push_back(line.c_str());
  envp.push_back(nullptr);
  DaemonLikeOptions options;
  Schema schema;
  RegisterDaemonLike(schema, &options);
  if (schema.LoadEnvironment(envp.data()).ok()) CheckPrintedConfigReloads(schema, options);
  return 0;
}
