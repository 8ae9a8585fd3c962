// vLLM's POST /tokenize and POST /detokenize (docs/reference/api.md#tokenize-and-detokenize): the
// served model's tokenizer over HTTP, so a client can count and check tokens as the model sees
// them — a chat request's messages rendered exactly as /v1/chat/completions renders them.
#include "common/status.h"
#include "common/strings.h"
#include "gateway/chat_prompt.h"
#include "gateway/openai_routes.h"
#include "nlohmann/json.hpp"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

// The body as a JSON object and the model it names (authorised first); a refusal otherwise.
struct Parsed {
  json body;
  ModelView model;
};

absl::StatusOr<Parsed> ParseBody(Frontend& frontend, const net::HttpRequest& req,
                                 ApiResponder& responder, std::optional<ApiError>* error) {
  EXA_RETURN_IF_ERROR(frontend.Authorize(req.Header("authorization")).status());
  Parsed p;
  try {
    p.body = json::parse(req.body);
  } catch (const json::exception& e) {
    *error = ApiError{400, StrCat("request body: invalid JSON: ", e.what()), ""};
    return p;
  }
  if (!p.body.is_object()) {
    *error = ApiError{400, "request body: expected a JSON object", ""};
    return p;
  }
  std::string model;
  if (auto it = p.body.find("model"); it != p.body.end() && !it->is_null()) {
    if (!it->is_string()) {
      *error = ApiError{400, "model: expected a string", "model"};
      return p;
    }
    model = it->get<std::string>();
  }
  responder.SetModel(frontend.ModelLabel(model));
  EXA_ASSIGN_OR_RETURN(p.model, frontend.FindModel(model));
  if (!p.model.tokenizer) return absl::UnavailableError("the model's tokenizer is not loaded yet");
  return p;
}

// The tokens of the body's `prompt` (a string; add_special_tokens, default true, as a completion
// encodes it) or `messages` (rendered as a chat completion renders them).
absl::StatusOr<std::vector<int32_t>> Tokens(const Parsed& p, const std::string& raw_body,
                                            size_t max_prompt_bytes,
                                            std::optional<ApiError>* error) {
  const json& body = p.body;
  if (body.contains("messages")) {
    TextRequest r;
    if ((*error = ParseChatMessages(body, raw_body, &r))) return std::vector<int32_t>();
    if (r.prompt.size() > max_prompt_bytes) {
      return FieldError("messages", StrCat(r.prompt.size(),
                                           " bytes, larger than "
                                           "gateway.max_prompt_bytes (",
                                           max_prompt_bytes, ")"));
    }
    return PromptTokens(r, p.model, max_prompt_bytes);
  }
  auto prompt = body.find("prompt");
  if (prompt == body.end() || !prompt->is_string()) {
    return FieldError("prompt", "expected a string (or send messages, a chat conversation)");
  }
  const std::string& text = prompt->get_ref<const std::string&>();
  if (text.size() > max_prompt_bytes) {
    return FieldError("prompt",
                      StrCat(text.size(), " bytes, larger than gateway.max_prompt_bytes (",
                             max_prompt_bytes, ")"));
  }
  bool special = true;
  if (auto it = body.find("add_special_tokens"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return FieldError("add_special_tokens", "expected true or false");
    special = it->get<bool>();
  }
  return p.model.tokenizer->tokenizer().Encode(text, special);
}

// The body's `tokens`: ids the model's tokenizer knows.
absl::StatusOr<std::vector<int32_t>> TokenIds(const Parsed& p) {
  auto it = p.body.find("tokens");
  if (it == p.body.end() || !it->is_array()) {
    return FieldError("tokens", "expected a list of token ids");
  }
  const int32_t vocab = p.model.tokenizer->tokenizer().vocab_size();
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(vocab) : v.get<int64_t>() < 0)) {
      return FieldError("tokens", StrCat("tokens[", i, "] ", v.dump(),
                                         ": expected a token id in [0, ", vocab, ")"));
    }
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

}  // namespace

void HandleTokenize(Frontend& frontend, const net::HttpRequest& req,
                    const std::shared_ptr<ApiResponder>& responder) {
  std::optional<ApiError> error;
  absl::StatusOr<Parsed> parsed = ParseBody(frontend, req, *responder, &error);
  absl::StatusOr<std::vector<int32_t>> tokens;
  if (parsed.ok() && !error) {
    tokens = Tokens(*parsed, req.body, frontend.options().max_prompt_bytes.value, &error);
  }
  if (error) return responder->Respond(ErrorResponse(*error));
  if (!parsed.ok()) return responder->Respond(StatusResponse(parsed.status()));
  if (!tokens.ok()) return responder->Respond(StatusResponse(tokens.status()));
  json out = {
      {"count", tokens->size()}, {"max_model_len", parsed->model.max_context}, {"tokens", *tokens}};
  responder->Respond({200, "application/json", SafeDump(out) + "\n", {}});
}

void HandleDetokenize(Frontend& frontend, const net::HttpRequest& req,
                      const std::shared_ptr<ApiResponder>& responder) {
  std::optional<ApiError> error;
  absl::StatusOr<Parsed> parsed = ParseBody(frontend, req, *responder, &error);
  if (error) return responder->Respond(ErrorResponse(*error));
  if (!parsed.ok()) return responder->Respond(StatusResponse(parsed.status()));
  absl::StatusOr<std::vector<int32_t>> ids = TokenIds(*parsed);
  if (!ids.ok()) return responder->Respond(StatusResponse(ids.status()));
  const std::string text =
      parsed->model.tokenizer->tokenizer().Decode(*ids, /*skip_special_tokens=*/false);
  responder->Respond({200, "application/json", SafeDump(json({{"prompt", text}})) + "\n", {}});
}

}  // namespace exa::gateway
