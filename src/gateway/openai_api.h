// The OpenAI-compatible HTTP API (ecosystem fit, docs/architecture.md): POST /v1/completions,
// POST /v1/chat/completions (streaming over SSE or not), GET /v1/models; errors in OpenAI's JSON
// shape {"error": {"message", "type", "param", "code"}}.
//
// Chat prompts (docs/reference/api.md#chat-templates): on a model whose tokenizer_config.json has a
// chat_template, the gateway renders the messages with it (add_generation_prompt true unless the
// body sets it; chat_template_kwargs such as enable_thinking become template variables) and
// encodes the rendering without adding special tokens; a template's raise_exception is a 400 on
// `messages`. A model without a template gets the messages' contents joined with newlines, which
// suits base models such as the bundled one.
#pragma once

#include "gateway/frontend.h"
#include "net/http_server.h"

namespace exa::gateway {

void AddOpenAiRoutes(net::HttpServer& server, Frontend& frontend);

}  // namespace exa::gateway
