#include "tools/generate_json.h"

#include <utility>
#include <vector>

namespace exa::tools {

nlohmann::json GenerateMessageJson(const exaserve::v1::GenerateResponse& message, bool logprobs,
                                   bool top_logprobs) {
  nlohmann::json j = {
      {"text", message.text()},
      {"token_ids", std::vector<int>(message.token_ids().begin(), message.token_ids().end())}};
  if (logprobs) {
    j["logprobs"] = std::vector<float>(message.logprobs().begin(), message.logprobs().end());
  }
  if (top_logprobs) {
    j["top_logprobs"] = nlohmann::json::array();
    for (const auto& top : message.top_logprobs()) {
      nlohmann::json position = nlohmann::json::array();
      for (int i = 0; i < top.token_ids_size() && i < top.logprobs_size(); ++i) {
        position.push_back({{"token_id", top.token_ids(i)}, {"logprob", top.logprobs(i)}});
      }
      j["top_logprobs"].push_back(std::move(position));
    }
  }
  if (message.finish_reason() != exaserve::v1::FINISH_REASON_UNSPECIFIED) {
    j["finish_reason"] = exaserve::v1::FinishReason_Name(message.finish_reason());
    j["prompt_tokens"] = message.usage().prompt_tokens();
    j["completion_tokens"] = message.usage().completion_tokens();
    j["time_to_first_token_ms"] = message.usage().time_to_first_token_ms();
  }
  if (!message.replica_id().empty()) j["replica_id"] = message.replica_id();
  if (message.has_seed()) j["seed"] = message.seed();
  return j;
}

}  // namespace exa::tools
