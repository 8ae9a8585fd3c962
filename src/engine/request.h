// What a caller asks an Engine for, and what it streams back. Plain structs: the gateway and node
// agent translate their protos to and from these at the edge (docs/architecture.md#module-map rule
// 2).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/sampler.h"
#include "engine/structured/json_schema.h"

namespace exa::engine {

using RequestId = uint64_t;

enum class FinishReason {
  kNone,       // still generating
  kStop,       // an end-of-sequence token, a stop token or a stop string
  kLength,     // max_tokens, or the model's context is full
  kCancelled,  // Cancel(), or the engine stopped
  kError,
};
const char* FinishReasonName(FinishReason r);

struct StreamEvent {
  RequestId id = 0;
  absl::Time time;     // when the token was produced (the engine's clock; virtual in the sim)
  int32_t token = -1;  // -1 on a final event that carries no new token
  std::string text;    // decoded text of the tokens so far not yet sent (empty without a
                       // detokenizer; held back while it could be the start of a stop string)
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;  // not OK when finished by cancellation or error
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  // On the final event a gateway sends its client: milliseconds from admission to the first
  // token (0 when none came).
  double time_to_first_token_ms = 0;
};

// Called on the engine thread for every generated token and once more (finished == true) at the
// end; it must not block (hand the event to another thread or queue).
using StreamCallback = std::function<void(const StreamEvent&)>;

struct GenerateRequest {
  std::vector<int32_t> prompt_tokens;
  int32_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's end-of-sequence ids
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;  // matched on decoded text; needs a detokenizer
  // vLLM's min_tokens: before this many tokens the end-of-sequence and stop ids are masked and
  // stop strings are not matched; a structured output's grammar still ends it. <= max_tokens.
  int32_t min_tokens = 0;
  // The text keeps special tokens (Detokenizer::NewStream); they are left out by default.
  bool keep_special_tokens = false;
  // Structured output (docs/architecture.md#structured-outputs): the output is JSON matching
  // `json_schema` (its text, as it crosses the wire), compiled into `grammar` (nullptr: free
  // text). Needs a detokenizer with a token trie.
  std::string json_schema;
  std::string json_prefix;  // text around the value (structured::Grammar::prefix, suffix)
  std::string json_suffix;
  // Or vLLM's guided_choice: the output is one of these strings (structured::CompileChoice).
  std::vector<std::string> choices;
  // Or vLLM's guided_regex: the output is text this pattern matches (CompileRegexGrammar).
  std::string regex;
  std::shared_ptr<const structured::Grammar> grammar;
  StreamCallback callback;
  // Health probes and warm-ups: admitted past a full queue (a small bounded lane of their own)
  // and scheduled ahead of every waiting request, so overload does not fail a probe.
  bool priority = false;
  // The gateway's id for the request, carried to the replica's node so one request can be
  // followed through the logs of every node it crossed, and which attempt this is (0 the first;
  // a retry or a resume on another replica counts up). Not used by the engine.
  std::string request_id;
  int32_t attempt = 0;
  // The gateway's number for this dispatch (router::ReplicaTable::Choice::dispatch), echoed in
  // the node's load reports once admitted (docs/architecture.md#load-on-change); 0: none. Not
  // used by the engine.
  uint64_t dispatch = 0;
  // Prefix caching (docs/architecture.md#prefix-cache): only requests with the same salt share
  // cached KV blocks. Gateways set it per tenant when tenants must not share (the timing of a
  // cache hit tells one tenant what another sent); a client may set its own to opt out.
  std::string cache_salt;
  // Mid-stream failover (docs/architecture.md#failover): the last `resumed_tokens` of
  // prompt_tokens are this request's own output from an earlier attempt, of which the caller
  // already streamed the first `resumed_text_bytes` bytes of text. The engine counts them as
  // generated (max_tokens, usage, sampling positions, stop strings) and streams on from there, so
  // the caller sees one continuous output.
  int32_t resumed_tokens = 0;
  uint64_t resumed_text_bytes = 0;
};

}  // namespace exa::engine
