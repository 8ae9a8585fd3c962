// `exaserve-cli --json generate`: one streamed Inference.Generate message as one JSON object
// (docs/reference/cli.md).
#pragma once

#include "exaserve/v1/inference.pb.h"
#include "nlohmann/json.hpp"

namespace exa::tools {

// {text, token_ids, ...}: with `logprobs` one log-probability per token id, with `top_logprobs`
// per token id its position's most likely tokens as [{token_id, logprob}]; on the last message
// finish_reason and usage; replica_id and seed where the message has them.
nlohmann::json GenerateMessageJson(const exaserve::v1::GenerateResponse& message, bool logprobs,
                                   bool top_logprobs);

}  // namespace exa::tools
