#include "engine/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::engine {
namespace {

using nlohmann::json;

// Upper bounds far above any real model; they keep a hostile config from asking for absurd
// allocations (a 405B Llama has hidden 16384, 126 layers, vocab 128256).
constexpr int64_t kMaxHidden = 1 << 17;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxPositions = 1 << 24;

absl::Status FieldError(std::string_view file, std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(file, ": ", field, " ", what));
}

absl::StatusOr<int64_t> GetInt(const json& j, std::string_view file, const char* field, int64_t lo,
                               int64_t hi, std::optional<int64_t> fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return FieldError(file, field, "is missing");
  }
  if (!it->is_number_integer())
    return FieldError(file, field, StrCat("must be an integer, got ", it->dump()));
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return FieldError(file, field, StrCat(v, " is out of range [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<double> GetFloat(const json& j, std::string_view file, const char* field, double lo,
                                double hi, std::optional<double> fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return FieldError(file, field, "is missing");
  }
  if (!it->is_number())
    return FieldError(file, field, StrCat("must be a number, got ", it->dump()));
  double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return FieldError(file, field, StrCat(v, " is out of range [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<bool> GetBool(const json& j, std::string_view file, const char* field,
                             bool fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return FieldError(file, field, StrCat("must be a boolean, got ", it->dump()));
  return it->get<bool>();
}

constexpr std::string_view kArchitectures[] = {
    "LlamaForCausalLM",  "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForCausalLM",  "Phi3ForCausalLM"};

bool IsGemma3(const ModelConfig& c) { return c.architecture == "Gemma3ForCausalLM"; }
bool IsGemma(const ModelConfig& c) { return IsGemma3(c) || c.architecture == "Gemma2ForCausalLM"; }

absl::Status ParseActivation(const json& j, std::string_view file, ModelConfig& c) {
  if (!IsGemma(c)) {
    auto act = j.find("hidden_act");
    if (act != j.end() && !(act->is_string() && act->get<std::string>() == "silu")) {
      return FieldError(file, "hidden_act",
                        StrCat(act->dump(), " is not supported; expected \"silu\""));
    }
    return absl::OkStatus();
  }
  // Gemma's MLP applies hidden_activation (default gelu_pytorch_tanh); gelu_new is the same
  // formula.
  auto act = j.find("hidden_activation");
  if (act != j.end() && !act->is_null() &&
      !(act->is_string() && (act->get<std::string>() == "gelu_pytorch_tanh" ||
                             act->get<std::string>() == "gelu_new"))) {
    return FieldError(
        file, "hidden_activation",
        StrCat(act->dump(), " is not supported; expected \"gelu_pytorch_tanh\" or \"gelu_new\""));
  }
  c.activation = Activation::kGeluTanh;
  return absl::OkStatus();
}

absl::Status ParseArchitecture(const json& j, std::string_view file, ModelConfig& c) {
  auto it = j.find("architectures");
  if (it == j.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) {
    return FieldError(file, "architectures", "must be a non-empty list of names");
  }
  c.architecture = (*it)[0].get<std::string>();
  if (std::find(std::begin(kArchitectures), std::end(kArchitectures), c.architecture) ==
      std::end(kArchitectures)) {
    std::string expected;
    for (std::string_view a : kArchitectures) StrAppend(&expected, expected.empty() ? "" : ", ", a);
    return FieldError(file, "architectures",
                      StrCat("\"", c.architecture, "\" is not supported; expected one of ",
                             expected, ", or Gemma3ForConditionalGeneration (its text model)"));
  }
  return ParseActivation(j, file, c);
}

absl::Status ParseShape(const json& j, std::string_view file, ModelConfig& c) {
  // Gemma 3's text_config often leaves fields to Gemma3TextConfig's defaults.
  const bool gemma3 = IsGemma3(c);
  auto gemma = [gemma3](int64_t v) { return gemma3 ? std::optional<int64_t>(v) : std::nullopt; };
  EXA_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, file, "vocab_size", 1, kMaxVocab, gemma(262208)));
  EXA_ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, file, "hidden_size", 1, kMaxHidden, gemma(2304)));
  EXA_ASSIGN_OR_RETURN(c.intermediate_size,
                       GetInt(j, file, "intermediate_size", 1, 8 * kMaxHidden, gemma(9216)));
  EXA_ASSIGN_OR_RETURN(c.num_layers,
                       GetInt(j, file, "num_hidden_layers", 1, kMaxLayers, gemma(26)));
  EXA_ASSIGN_OR_RETURN(c.num_heads, GetInt(j, file, "num_attention_heads", 1, 4096, gemma(8)));
  EXA_ASSIGN_OR_RETURN(c.num_kv_heads, GetInt(j, file, "num_key_value_heads", 1, 4096,
                                              gemma3 ? int64_t{4} : int64_t{c.num_heads}));
  if (c.num_heads % c.num_kv_heads != 0) {
    return FieldError(file, "num_key_value_heads",
                      StrCat(c.num_kv_heads, " must divide num_attention_heads ", c.num_heads));
  }
  std::optional<int64_t> default_head_dim;
  if (c.hidden_size % c.num_heads == 0) default_head_dim = c.hidden_size / c.num_heads;
  if (IsGemma(c)) default_head_dim = 256;  // Gemma2Config's and Gemma3TextConfig's default
  EXA_ASSIGN_OR_RETURN(c.head_dim, GetInt(j, file, "head_dim", 2, 1024, default_head_dim));
  if (c.head_dim % 2 != 0) {
    return FieldError(file, "head_dim", StrCat(c.head_dim, " must be even for rotary embeddings"));
  }
  EXA_ASSIGN_OR_RETURN(c.max_position_embeddings,
                       GetInt(j, file, "max_position_embeddings", 1, kMaxPositions,
                              IsGemma3(c) ? std::optional<int64_t>(131072) : std::nullopt));
  return absl::OkStatus();
}

absl::Status ParseRopeScaling(const json& j, std::string_view file, ModelConfig& c) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return FieldError(file, "rope_scaling", "must be null or an object");
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    auto t = it->find(key);
    if (t != it->end() && t->is_string()) type = t->get<std::string>();
  }
  if (type == "default") return absl::OkStatus();
  if (type != "llama3" && type != "linear") {
    return FieldError(
        file, "rope_scaling.rope_type",
        StrCat("\"", type, "\" is not supported; expected \"llama3\", \"linear\" or null"));
  }
  const std::string f = StrCat(file, ": rope_scaling");
  EXA_ASSIGN_OR_RETURN(c.rope_factor, GetFloat(*it, f, "factor", 1.0, 1024.0, std::nullopt));
  if (type == "linear") {  // every position divided by `factor`
    c.rope_scaling = RopeScaling::kLinear;
    return absl::OkStatus();
  }
  c.rope_scaling = RopeScaling::kLlama3;
  EXA_ASSIGN_OR_RETURN(c.rope_low_freq_factor,
                       GetFloat(*it, f, "low_freq_factor", 0.0, 1024.0, 1.0));
  EXA_ASSIGN_OR_RETURN(c.rope_high_freq_factor,
                       GetFloat(*it, f, "high_freq_factor", 0.0, 1024.0, 4.0));
  if (!(c.rope_high_freq_factor > c.rope_low_freq_factor)) {
    return FieldError(f, "high_freq_factor", "must be greater than low_freq_factor");
  }
  EXA_ASSIGN_OR_RETURN(c.rope_original_max_positions,
                       GetInt(*it, f, "original_max_position_embeddings", 1, kMaxPositions, 8192));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(const json& j, std::string_view file,
                                                   const char* field, int32_t vocab) {
  std::vector<int32_t> out;
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return out;
  json list = it->is_array() ? *it : json::array({*it});
  for (const json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
      return FieldError(file, field,
                        StrCat(v.dump(), " is not a token id below vocab_size ", vocab));
    }
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return out;
}

// c.layer_windows: `window` on the layers `layer_types` names "sliding_attention" (newer
// configs of every family), else on those `sliding` marks; empty when no layer slides.
absl::Status ParseLayerWindows(const json& j, std::string_view file, int32_t window,
                               std::vector<bool> sliding, ModelConfig& c) {
  auto types = j.find("layer_types");
  if (types != j.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.num_layers)) {
      return FieldError(file, "layer_types",
                        StrCat("must list num_hidden_layers (", c.num_layers, ") layer types"));
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      const bool full = t.is_string() && t.get<std::string>() == "full_attention";
      if (!full && !(t.is_string() && t.get<std::string>() == "sliding_attention")) {
        return FieldError(file, StrCat("layer_types[", i, "]"),
                          StrCat(t.dump(), " is not \"sliding_attention\" or \"full_attention\""));
      }
      sliding[i] = !full;
    }
  }
  if (window <= 0 || std::find(sliding.begin(), sliding.end(), true) == sliding.end()) {
    return absl::OkStatus();
  }
  c.layer_windows.assign(static_cast<size_t>(c.num_layers), 0);
  for (size_t i = 0; i < sliding.size(); ++i) {
    if (sliding[i]) c.layer_windows[i] = window;
  }
  return absl::OkStatus();
}

// Gemma 2's and 3's own fields (transformers' Gemma2Config and Gemma3TextConfig, their defaults
// where a field is absent).
absl::Status ParseGemma(const json& j, std::string_view file, ModelConfig& c) {
  const bool gemma3 = IsGemma3(c);
  c.qk_norm = gemma3;
  c.norm_weight_offset = true;
  c.sandwich_norms = true;
  c.embedding_scale = std::sqrt(static_cast<float>(c.hidden_size));
  EXA_ASSIGN_OR_RETURN(const double scalar,
                       GetFloat(j, file, "query_pre_attn_scalar", 1e-6, 1e9, 256.0));
  c.attention_scale = static_cast<float>(1.0 / std::sqrt(scalar));
  // Gemma 2 soft-caps attention scores and logits: cap * tanh(x / cap); Gemma 3 does neither.
  EXA_ASSIGN_OR_RETURN(const double attn_cap,
                       GetFloat(j, file, "attn_logit_softcapping", 1e-3, 1e9, gemma3 ? 0.0 : 50.0));
  EXA_ASSIGN_OR_RETURN(const double final_cap, GetFloat(j, file, "final_logit_softcapping", 1e-3,
                                                        1e9, gemma3 ? 0.0 : 30.0));
  c.attn_logit_softcap = static_cast<float>(attn_cap);
  c.final_logit_softcap = static_cast<float>(final_cap);
  EXA_ASSIGN_OR_RETURN(const bool bidirectional,
                       GetBool(j, file, "use_bidirectional_attention", false));
  if (bidirectional) {
    return FieldError(file, "use_bidirectional_attention", "true is not supported");
  }
  EXA_ASSIGN_OR_RETURN(const int64_t window,
                       GetInt(j, file, "sliding_window", 1, kMaxPositions, int64_t{4096}));
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers));
  if (!gemma3) {  // Gemma 2, without layer_types: the even layers slide
    for (int64_t i = 0; i < c.num_layers; ++i) sliding[i] = i % 2 == 0;
    return ParseLayerWindows(j, file, static_cast<int32_t>(window), sliding, c);
  }
  EXA_ASSIGN_OR_RETURN(const double local_theta,
                       GetFloat(j, file, "rope_local_base_freq", 1.0, 1e12, 10000.0));
  c.rope_local_theta = static_cast<float>(local_theta);
  // Gemma 3, without layer_types: every layer but each sliding_window_pattern-th slides.
  EXA_ASSIGN_OR_RETURN(const int64_t pattern,
                       GetInt(j, file, "sliding_window_pattern", 1, kMaxLayers, int64_t{6}));
  for (int64_t i = 0; i < c.num_layers; ++i) sliding[i] = (i + 1) % pattern != 0;
  return ParseLayerWindows(j, file, static_cast<int32_t>(window), sliding, c);
}

absl::Status ParseRest(const json& j, std::string_view file, ModelConfig& c) {
  EXA_ASSIGN_OR_RETURN(c.rms_norm_eps, GetFloat(j, file, "rms_norm_eps", 0.0, 1.0, 1e-6));
  EXA_ASSIGN_OR_RETURN(c.rope_theta,
                       GetFloat(j, file, "rope_theta", 1.0, 1e12, IsGemma3(c) ? 1e6 : 10000.0));
  EXA_RETURN_IF_ERROR(ParseRopeScaling(j, file, c));
  EXA_ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBool(j, file, "tie_word_embeddings", IsGemma(c)));
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  EXA_ASSIGN_OR_RETURN(bool attention_bias, GetBool(j, file, "attention_bias", false));
  c.qkv_bias = attention_bias || c.architecture == "Qwen2ForCausalLM";
  c.qk_norm = c.architecture == "Qwen3ForCausalLM";
  EXA_ASSIGN_OR_RETURN(bool mlp_bias, GetBool(j, file, "mlp_bias", false));
  if (mlp_bias) return FieldError(file, "mlp_bias", "true is not supported");
  EXA_ASSIGN_OR_RETURN(auto bos, ParseTokenIds(j, file, "bos_token_id", c.vocab_size));
  if (!bos.empty()) c.bos_token_id = bos[0];
  EXA_ASSIGN_OR_RETURN(c.eos_token_ids, ParseTokenIds(j, file, "eos_token_id", c.vocab_size));
  if (IsGemma(c)) return ParseGemma(j, file, c);
  if (c.architecture == "Phi3ForCausalLM") {
    c.fused_projections = true;
    EXA_ASSIGN_OR_RETURN(const double rotary,
                         GetFloat(j, file, "partial_rotary_factor", 0.0, 1.0, 1.0));
    if (rotary != 1.0) {
      return FieldError(file, "partial_rotary_factor",
                        StrCat(rotary, " is not supported; expected 1 (every dimension rotated)"));
    }
  }
  // Mistral's sliding_window applies to every layer. Qwen2 and Qwen3 configs carry one that
  // applies only with use_sliding_window: true, and then to the layers from max_window_layers on.
  const bool qwen = c.architecture == "Qwen2ForCausalLM" || c.architecture == "Qwen3ForCausalLM";
  EXA_ASSIGN_OR_RETURN(const bool use_window, GetBool(j, file, "use_sliding_window", !qwen));
  EXA_ASSIGN_OR_RETURN(const int64_t window,
                       GetInt(j, file, "sliding_window", 1, kMaxPositions, int64_t{0}));
  int64_t first_sliding = 0;
  if (qwen) {
    EXA_ASSIGN_OR_RETURN(first_sliding,
                         GetInt(j, file, "max_window_layers", 0, kMaxLayers, int64_t{28}));
  }
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers));
  for (int64_t i = first_sliding; i < c.num_layers; ++i) sliding[i] = use_window;
  return ParseLayerWindows(j, file, static_cast<int32_t>(window), sliding, c);
}

// Gemma 3's multimodal checkpoints: the language model's config is text_config, the top level's
// token ids apply to it. Only the text is served (the loader finds its weights' prefix).
absl::StatusOr<json> Gemma3TextConfig(const json& j, std::string_view file) {
  auto text = j.find("text_config");
  if (text == j.end() || !text->is_object()) {
    return FieldError(file, "text_config", "must be an object for Gemma3ForConditionalGeneration");
  }
  json merged = *text;
  for (const char* ids : {"bos_token_id", "eos_token_id"}) {
    if (!merged.contains(ids) && j.contains(ids)) merged[ids] = j[ids];
  }
  merged["architectures"] = {"Gemma3ForCausalLM"};
  return merged;
}

}  // namespace

int32_t ModelConfig::MaxContext() const { return max_position_embeddings; }

int64_t ModelConfig::ParameterCount() const {
  int64_t h = hidden_size;
  int64_t per_layer = 2 * h + h * q_dim() + 2 * h * kv_dim() + q_dim() * h +
                      3 * h * intermediate_size + (qkv_bias ? q_dim() + 2 * kv_dim() : 0) +
                      (qk_norm ? 2 * head_dim : 0) + (sandwich_norms ? 2 * h : 0);
  int64_t embed = int64_t{vocab_size} * h;
  return embed * (tie_word_embeddings ? 1 : 2) + h + num_layers * per_layer;
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view file) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(StrCat(file, ": not a JSON object"));
  }
  ModelConfig c;
  std::string text_file;
  try {
    auto arch = j.find("architectures");
    if (arch != j.end() && arch->is_array() && !arch->empty() &&
        (*arch)[0] == "Gemma3ForConditionalGeneration") {
      EXA_ASSIGN_OR_RETURN(j, Gemma3TextConfig(j, file));
      text_file = StrCat(file, ": text_config");
      file = text_file;
    }
    EXA_RETURN_IF_ERROR(ParseArchitecture(j, file, c));
    EXA_RETURN_IF_ERROR(ParseShape(j, file, c));
    EXA_RETURN_IF_ERROR(ParseRest(j, file, c));
  } catch (const json::exception& e) {  // defensive: typed getters are checked above
    return absl::InvalidArgumentError(StrCat(file, ": ", e.what()));
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  EXA_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxModelConfigBytes));
  EXA_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(text, path));
  const std::string gen_path = dir + "/generation_config.json";
  auto gen_text = ReadFile(gen_path, kMaxModelConfigBytes);
  if (!gen_text.ok()) return c;
  json g = json::parse(*gen_text, nullptr, false);
  if (g.is_discarded() || !g.is_object()) {
    return absl::InvalidArgumentError(StrCat(gen_path, ": not a JSON object"));
  }
  EXA_ASSIGN_OR_RETURN(auto eos, ParseTokenIds(g, gen_path, "eos_token_id", c.vocab_size));
  for (int32_t id : eos) {
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(id);
    }
  }
  return c;
}

}  // namespace exa::engine
