#include "engine/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/tokenizer/added_vocabulary.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/json_fields.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

namespace jf = json_fields;

// tokenizer.json nests about 6 levels; the bound is checked before parsing so that no JSON
// operation ever recurses deeply on a hostile file.
constexpr int kMaxJsonDepth = 64;

absl::Status CheckJsonDepth(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(
            StrCat("JSON nested more than ", kMaxJsonDepth, " levels deep at byte ", i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<jf::Json> ParseJson(std::string_view text) {
  EXA_RETURN_IF_ERROR(CheckJsonDepth(text));
  try {
    return jf::Json::parse(text.begin(), text.end());
  } catch (const jf::Json::exception& e) {
    return absl::InvalidArgumentError(StrCat("not valid JSON: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<BpeModel>> ParseModel(const jf::Json& root) {
  const jf::Json* model = jf::Find(root, "model");
  if (model == nullptr) return jf::Missing("model");
  EXA_RETURN_IF_ERROR(jf::ExpectObject(*model, "model"));
  EXA_ASSIGN_OR_RETURN(const auto type, jf::OptionalString(*model, "type", "model"));
  // Files from before "type" was written are recognised by their fields, as Hugging Face does.
  const bool is_bpe = type.has_value() ? *type == "BPE" : model->contains("merges");
  if (!is_bpe) {
    return jf::Error("model.type", type.value_or("(none)"), "unsupported model; supported: BPE");
  }
  return BpeModel::Parse(*model, "model");
}

absl::StatusOr<AddedToken> ParseAddedToken(const jf::Json& node, const std::string& path) {
  EXA_RETURN_IF_ERROR(jf::ExpectObject(node, path));
  AddedToken token;
  EXA_ASSIGN_OR_RETURN(token.content, jf::String(node, "content", path));
  EXA_ASSIGN_OR_RETURN(const int64_t id, jf::Int(node, "id", path, 0, BpeModel::kMaxTokenId));
  token.id = static_cast<int32_t>(id);
  EXA_ASSIGN_OR_RETURN(token.special, jf::Bool(node, "special", path, false));
  EXA_ASSIGN_OR_RETURN(token.single_word, jf::Bool(node, "single_word", path, false));
  EXA_ASSIGN_OR_RETURN(token.lstrip, jf::Bool(node, "lstrip", path, false));
  EXA_ASSIGN_OR_RETURN(token.rstrip, jf::Bool(node, "rstrip", path, false));
  // Hugging Face's default: special tokens are matched on the raw text, others normalized.
  EXA_ASSIGN_OR_RETURN(token.normalized, jf::Bool(node, "normalized", path, !token.special));
  return token;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::directory) {
    return absl::InvalidArgumentError(
        StrCat(path, ": is a directory; give the tokenizer file, e.g. ",
               (std::filesystem::path(path) / "tokenizer.json").string()));
  }
  if (type == std::filesystem::file_type::fifo || type == std::filesystem::file_type::socket ||
      type == std::filesystem::file_type::block || type == std::filesystem::file_type::character) {
    return absl::InvalidArgumentError(StrCat(path, ": not a regular file"));
  }
  EXA_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxFileBytes));
  return FromJson(text, path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                               std::string_view source_name) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  absl::Status status;
  try {
    status = tokenizer->Load(json_text);
  } catch (const std::exception& e) {
    // The field accessors check types first, so this is a safety net, not a path we expect.
    status = absl::InvalidArgumentError(StrCat("malformed tokenizer: ", e.what()));
  }
  if (!status.ok()) return Annotate(status, source_name);
  return tokenizer;
}

absl::Status Tokenizer::Load(std::string_view json_text) {
  EXA_ASSIGN_OR_RETURN(const jf::Json root, ParseJson(json_text));
  EXA_RETURN_IF_ERROR(jf::ExpectObject(root, "(top level)"));
  EXA_ASSIGN_OR_RETURN(const auto version, jf::OptionalString(root, "version", ""));
  if (version.has_value() && *version != "1.0") {
    return jf::Error("version", *version, "unknown tokenizer.json version; expected \"1.0\"");
  }
  EXA_ASSIGN_OR_RETURN(model_, ParseModel(root));
  if (const jf::Json* node = jf::Find(root, "normalizer")) {
    EXA_ASSIGN_OR_RETURN(normalizer_, ParseNormalizer(*node, "normalizer", 0));
  }
  if (const jf::Json* node = jf::Find(root, "pre_tokenizer")) {
    EXA_ASSIGN_OR_RETURN(pre_tokenizer_, ParsePreTokenizer(*node, "pre_tokenizer", 0));
  }
  if (const jf::Json* node = jf::Find(root, "post_processor")) {
    EXA_ASSIGN_OR_RETURN(post_processor_, ParsePostProcessor(*node, "post_processor", 0));
  }
  if (const jf::Json* node = jf::Find(root, "decoder")) {
    EXA_ASSIGN_OR_RETURN(decoder_, ParseDecoder(*node, "decoder", 0));
  }
  return LoadAddedTokens(root);
}

absl::Status Tokenizer::LoadAddedTokens(const jf::Json& root) {
  std::vector<AddedToken> tokens;
  std::vector<std::string> normalized_forms;
  if (const jf::Json* list = jf::Find(root, "added_tokens")) {
    EXA_RETURN_IF_ERROR(jf::ExpectArray(*list, "added_tokens"));
    for (size_t i = 0; i < list->size(); ++i) {
      EXA_ASSIGN_OR_RETURN(AddedToken token,
                           ParseAddedToken((*list)[i], jf::Child("added_tokens", i)));
      // Hugging Face gives an added token that is also a model token the model's id.
      if (const auto model_id = model_->TokenToId(token.content)) token.id = *model_id;
      if (token.content.empty()) continue;  // Hugging Face ignores empty added tokens.
      std::string normalized = token.content;
      if (token.normalized && normalizer_ != nullptr) {
        normalized = normalizer_->Normalize(token.content);
      }
      added_ids_[token.content] = token.id;
      added_contents_[token.id] = token.content;
      added_decode_strings_[token.id] = token.normalized ? normalized : token.content;
      if (token.special) {
        special_contents_.insert(token.content);
        special_ids_.insert(token.id);
      }
      vocab_size_ = std::max(vocab_size_, token.id + 1);
      normalized_forms.push_back(std::move(normalized));
      tokens.push_back(std::move(token));
    }
  }
  vocab_size_ = std::max(vocab_size_, model_->id_limit());
  added_ = std::make_unique<AddedVocabulary>(std::move(tokens), normalized_forms);
  return absl::OkStatus();
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  const std::string valid = utf8::IsValid(text) ? std::string(text) : utf8::Lossy(text);
  std::vector<int32_t> ids;
  for (const Segment& segment : added_->SplitRaw(valid)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else if (segment.end > segment.begin) {
      EncodeSegment(valid.substr(segment.begin, segment.end - segment.begin), segment.begin == 0,
                    &ids);
    }
  }
  if (add_special_tokens && post_processor_ != nullptr) post_processor_->Process(&ids);
  return ids;
}

// One stretch of text between raw-matched added tokens: normalize, cut out the normalized added
// tokens, pre-tokenize, then BPE each word.
void Tokenizer::EncodeSegment(std::string text, bool at_start, std::vector<int32_t>* ids) const {
  if (normalizer_ != nullptr) text = normalizer_->Normalize(std::move(text));
  std::vector<Piece> pieces;
  for (const Segment& segment : added_->SplitNormalized(text)) {
    if (segment.id >= 0 || segment.end <= segment.begin) {
      if (segment.id >= 0) ids->push_back(segment.id);
      continue;
    }
    pieces.clear();
    pieces.push_back(
        {text.substr(segment.begin, segment.end - segment.begin), at_start && segment.begin == 0});
    if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(&pieces);
    for (const Piece& piece : pieces) model_->Tokenize(piece.text, ids);
  }
}

const std::string* Tokenizer::DecodeString(int32_t id) const {
  auto it = added_decode_strings_.find(id);
  if (it != added_decode_strings_.end()) return &it->second;
  return model_->IdToToken(id);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return DecodeWith(ids, skip_special_tokens, InvalidUtf8::kReplace);
}

std::string Tokenizer::DecodeWith(std::span<const int32_t> ids, bool skip_special_tokens,
                                  InvalidUtf8 invalid) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* token = DecodeString(id);
    if (token == nullptr) continue;
    if (skip_special_tokens && special_contents_.contains(*token)) continue;
    tokens.push_back(*token);
  }
  if (decoder_ == nullptr) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) StrAppend(&joined, i == 0 ? "" : " ", tokens[i]);
    return joined;
  }
  decoder_->DecodeChain(&tokens, invalid);
  std::string text;
  for (const std::string& piece : tokens) text += piece;
  return text;
}

std::vector<std::optional<std::string>> Tokenizer::AllTokenBytes() const {
  // Decoders treat the first token of a text apart (Metaspace drops its prepended ▁, Strip a
  // leading space), and generated tokens never come first: each token is decoded after an
  // ordinary anchor token, whose own bytes are then cut off.
  int32_t anchor = -1;
  if (const auto a = TokenToId("a"); a && !IsSpecial(*a)) anchor = *a;
  const std::string anchor_bytes =
      anchor >= 0 ? DecodeWith(std::span(&anchor, 1), false, InvalidUtf8::kKeep) : "";
  std::vector<std::optional<std::string>> out(static_cast<size_t>(vocab_size_));
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (DecodeString(id) == nullptr || IsSpecial(id)) continue;
    if (anchor >= 0) {
      const int32_t pair[] = {anchor, id};
      std::string both = DecodeWith(pair, false, InvalidUtf8::kKeep);
      if (both.starts_with(anchor_bytes)) {
        out[static_cast<size_t>(id)] = both.substr(anchor_bytes.size());
        continue;
      }
    }
    out[static_cast<size_t>(id)] = DecodeWith(std::span(&id, 1), false, InvalidUtf8::kKeep);
  }
  return out;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto it = added_ids_.find(absl::string_view(token.data(), token.size()));
  if (it != added_ids_.end()) return it->second;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  auto it = added_contents_.find(id);
  if (it != added_contents_.end()) return it->second;
  const std::string* token = model_->IdToToken(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

bool Tokenizer::IsSpecial(int32_t id) const { return special_ids_.contains(id); }

}  // namespace exa::engine
