// `exaserve-cli generate`: a prompt streamed through a gateway's Inference.Generate, the reply
// printed as it arrives (with --json, one object per message: generate_json.h), its output held
// to a JSON Schema, a regular expression or a list of choices when asked (docs/reference/cli.md).
//
// Exit codes: 0 the reply ended, 1 the node could not be reached or failed the call, 2 usage
// (a bad flag, or a request the gateway refused as INVALID_ARGUMENT or NOT_FOUND).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/cli_common.h"

namespace exa::tools {

struct GenerateOptions {
  std::string prompt, model, version;
  int max_tokens = 0;
  int min_tokens = 0;
  float temperature = 0;
  float top_p = 1, min_p = 0;
  int top_k = 0;
  int64_t seed = -1;
  std::vector<std::string> stop, headers;  // headers: KEY=VALUE gRPC metadata (version routes)
  bool logprobs = false;
  int top_logprobs = 0;
  // Structured output, one of: the reply matches this JSON Schema, this regular expression, or
  // is one of these strings.
  std::string json_schema, regex;
  std::vector<std::string> choices;
  bool keep_special_tokens = false;
  bool prompt_given = false;
};

void AddGenerateFlags(CLI::App& cmd, GenerateOptions* options);
int RunGenerate(const ClusterAccess& cluster, bool json, GenerateOptions options);

}  // namespace exa::tools
