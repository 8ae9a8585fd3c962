// The prompt tokens of a text request (docs/reference/api.md#chat-templates): the caller's token
// ids; for a chat request on a model with a chat template, the template's rendering of the
// conversation encoded without the tokenizer's own special tokens (the rendering already holds
// them, as bos_token, which is how vLLM and transformers encode a chat prompt); otherwise the
// prompt text encoded as the tokenizer's post-processor says.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "gateway/frontend.h"

namespace exa::gateway {

// INVALID_ARGUMENT naming `messages` when the template raises (its raise_exception message) or
// renders more than `max_prompt_bytes`.
absl::StatusOr<std::vector<int32_t>> PromptTokens(TextRequest& request, const ModelView& model,
                                                  size_t max_prompt_bytes);

}  // namespace exa::gateway
