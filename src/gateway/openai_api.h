// The OpenAI-compatible HTTP API (docs/reference/api.md#the-openai-compatible-http-api):
// POST /v1/completions (a prompt or a batch of them), POST /v1/chat/completions (streaming over
// SSE or not, `n` choices each, log-probabilities in OpenAI's shapes), GET /v1/models and
// GET /v1/models/{id}, and vLLM's POST /tokenize and POST /detokenize; errors in OpenAI's JSON
// shape {"error": {"message", "type", "param", "code"}}; every response carries x-request-id.
//
// Chat prompts (docs/reference/api.md#chat-templates): on a model whose tokenizer_config.json has a
// chat_template, the gateway renders the messages with it (add_generation_prompt true unless the
// body sets it; chat_template_kwargs such as enable_thinking become template variables) and
// encodes the rendering without adding special tokens; a template's raise_exception is a 400 on
// `messages`. A model without a template gets the messages' contents joined with newlines, which
// suits base models such as the bundled one.
#pragma once

#include <functional>
#include <string>

#include "gateway/frontend.h"
#include "net/http_server.h"

namespace exa::gateway {

// Where routes go: (method, path, handler), a path ending in '*' covering the paths under it
// (net::HttpServer::AddRoute's rule).
using RouteAdder = std::function<void(std::string method, std::string path, net::HttpHandler)>;

// Adds every route of the API; `frontend` must outlive the handlers.
void AddOpenAiRoutes(const RouteAdder& add, Frontend& frontend);
void AddOpenAiRoutes(net::HttpServer& server, Frontend& frontend);

}  // namespace exa::gateway
