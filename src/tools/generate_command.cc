#include "tools/generate_command.h"

#include <iostream>
#include <map>

#include "common/chars.h"
#include "common/strings.h"
#include "exaserve/v1/inference.grpc.pb.h"
#include "net/tls.h"
#include "tools/generate_json.h"

namespace exa::tools {

void AddGenerateFlags(CLI::App& cmd, GenerateOptions* options) {
  GenerateOptions& gen = *options;
  // One prompt, listed once: --prompt (for a prompt that starts with '-') is the positional's
  // other spelling, kept out of the help.
  auto given = [&gen](const std::string&) { gen.prompt_given = true; };
  cmd.add_option("prompt", gen.prompt, "prompt text (or --prompt TEXT)")->each(given);
  cmd.add_option("--prompt", gen.prompt)->each(given)->group("");
  cmd.add_option("--model", gen.model,
                 "model name, or NAME@VERSION (default: the gateway's default)");
  cmd.add_option("--version", gen.version, "model version (default: any)");
  cmd.add_option("--max-tokens", gen.max_tokens, "tokens to generate (default: server's)");
  cmd.add_option("--min-tokens", gen.min_tokens,
                 "no end (end-of-sequence, stop string) before this many tokens (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--temperature", gen.temperature, "0 for greedy (default 0)");
  cmd.add_option("--top-p", gen.top_p, "nucleus sampling mass, (0, 1] (default 1: off)");
  cmd.add_option("--top-k", gen.top_k, "keep the k most likely tokens (default 0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--min-p", gen.min_p,
                 "drop tokens below this fraction of the most likely one's probability, [0, 1] "
                 "(default 0: off)");
  cmd.add_option("--seed", gen.seed, "sampling seed");
  // One value per flag, so that a prompt after them stays the prompt.
  cmd.add_option("--stop", gen.stop, "stop string (repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  cmd.add_flag("--logprobs", gen.logprobs,
               "ask for each token's log-probability (printed with --json)");
  cmd.add_option("--top-logprobs", gen.top_logprobs,
                 "and this many most likely tokens at each position, 0-20 (printed with --json)")
      ->check(CLI::Range(0, 20));
  auto* schema =
      cmd.add_option("--json-schema", gen.json_schema, "a JSON Schema the reply must match (JSON)");
  auto* regex = cmd.add_option("--regex", gen.regex,
                               "a regular expression the whole reply must match (ECMA-262)");
  auto* choice = cmd.add_option("--choice", gen.choices,
                                "the reply is exactly one of these strings (repeatable)")
                     ->expected(1)
                     ->allow_extra_args(false)
                     ->take_all();
  schema->excludes(regex)->excludes(choice);
  regex->excludes(choice);
  cmd.add_flag("--keep-special-tokens", gen.keep_special_tokens,
               "keep special tokens (such as <|im_end|>) in the text");
  cmd.add_option("--header", gen.headers,
                 "KEY=VALUE request metadata, e.g. x-model-version=v2 (repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
}

namespace {

exaserve::v1::GenerateRequest BuildRequest(const GenerateOptions& o) {
  exaserve::v1::GenerateRequest request;
  request.set_model(o.model);
  request.set_version(o.version);
  request.set_prompt(o.prompt);
  request.set_max_tokens(o.max_tokens);
  request.set_min_tokens(o.min_tokens);
  request.mutable_sampling()->set_temperature(o.temperature);
  request.mutable_sampling()->set_top_p(o.top_p);
  request.mutable_sampling()->set_top_k(o.top_k);
  request.mutable_sampling()->set_min_p(o.min_p);
  if (o.seed >= 0) request.mutable_sampling()->set_seed(static_cast<uint64_t>(o.seed));
  request.mutable_sampling()->set_logprobs(o.logprobs);
  request.mutable_sampling()->set_top_logprobs(o.top_logprobs);
  for (const auto& s : o.stop) request.add_stop(s);
  request.set_json_schema(o.json_schema);
  request.set_regex(o.regex);
  for (const auto& c : o.choices) request.add_choice(c);
  request.set_keep_special_tokens(o.keep_special_tokens);
  return request;
}

}  // namespace

int RunGenerate(const ClusterAccess& cluster, bool json, GenerateOptions o) {
  if (!o.prompt_given) return Usage("generate: a prompt is required, e.g. generate \"1+1=\"");
  if (std::string e = SplitModelVersion("--model", &o.model, &o.version); !e.empty()) {
    return Usage(e);
  }
  if (size_t bad = FindInvalidUtf8(o.prompt); bad != std::string_view::npos) {
    return Usage(StrCat("generate: the prompt is not UTF-8 (byte ", bad, ")"));
  }
  o.logprobs = o.logprobs || o.top_logprobs > 0;
  std::map<std::string, std::string> headers;
  if (!ParsePairs("--header", o.headers, &headers)) return kUsageExitCode;
  auto stub = exaserve::v1::Inference::NewStub(net::NewChannel(cluster.addr));
  auto ctx = MakeContext(cluster);
  for (const auto& [k, v] : headers) ctx->AddMetadata(AsciiLower(k), v);
  auto reader = stub->Generate(ctx.get(), BuildRequest(o));
  exaserve::v1::GenerateResponse message;
  bool printed = false;
  while (reader->Read(&message)) {
    if (json) {
      std::cout << GenerateMessageJson(message, o.logprobs, o.top_logprobs > 0)
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else {
      std::cout << message.text() << std::flush;
      printed = printed || !message.text().empty();
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) {
    if (printed) std::cout << "\n";
    if (s.error_code() == grpc::INVALID_ARGUMENT || s.error_code() == grpc::NOT_FOUND) {
      return Usage(s.error_message());
    }
    if (s.error_code() == grpc::UNIMPLEMENTED && s.error_message().empty()) {
      return RpcFailure(cluster.addr, s,
                        "this node does not serve generation: it is not a gateway "
                        "(`exaserve-cli members` lists roles)");
    }
    return RpcFailure(cluster.addr, s);
  }
  if (!json) std::cout << "\n";
  return 0;
}

}  // namespace exa::tools
