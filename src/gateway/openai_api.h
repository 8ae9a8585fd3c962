// The OpenAI-compatible HTTP API (ecosystem fit, docs/architecture.md): POST /v1/completions,
// POST /v1/chat/completions (streaming over SSE or not), GET /v1/models; errors in OpenAI's JSON
// shape {"error": {"message", "type", "param", "code"}}.
//
// Chat prompts: rendering tokenizer_config.json's Jinja chat_template is not supported yet; the
// documented fallback joins the messages' contents with newlines, which suits base models such
// as the bundled one.
#pragma once

#include "gateway/frontend.h"
#include "net/http_server.h"

namespace exa::gateway {

void AddOpenAiRoutes(net::HttpServer& server, Frontend& frontend);

}  // namespace exa::gateway
