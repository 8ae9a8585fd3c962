// The model's shape, parsed from a Hugging Face `config.json` (LlamaForCausalLM and relatives:
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM,
// Phi3ForCausalLM).
// Everything the forward pass and the loader need to know about a checkpoint lives here, validated
// once so later code can trust it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::engine {

enum class RopeScaling { kNone, kLlama3, kLinear };

// The MLP's gate: silu(gate) * up (Llama), or the tanh approximation of GELU (Gemma's
// gelu_pytorch_tanh): 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * up.
enum class Activation { kSilu, kGeluTanh };

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;  // < num_heads for grouped-query attention
  int32_t head_dim = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling = RopeScaling::kNone;
  // llama3 rope scaling parameters (Llama 3.1 defaults when the type is llama3); `rope_factor`
  // also divides every frequency under linear scaling.
  float rope_factor = 8.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int32_t rope_original_max_positions = 8192;
  int32_t max_position_embeddings = 0;
  // The longest sequence this engine serves: max_position_embeddings.
  int32_t MaxContext() const;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2 always; Llama with attention_bias: true
  // Qwen3: q and k RMS-normalised per head (weights of head_dim) before the rotary embedding.
  bool qk_norm = false;
  // Phi-3: q, k and v stored as one qkv_proj, gate and up as one gate_up_proj (the loader splits
  // them into views).
  bool fused_projections = false;
  // Gemma 2 and 3 (docs/architecture.md#model-families). Every RMSNorm multiplies by 1 + w (the
  // loader hands the model 1 + w), the embedding is scaled by sqrt(hidden_size), and the attention
  // and MLP outputs are RMS-normalised before their residual adds (`sandwich_norms`: the
  // checkpoint's post_attention_layernorm is the attention output's norm, pre_feedforward_layernorm
  // the MLP input's, post_feedforward_layernorm the MLP output's).
  bool norm_weight_offset = false;
  float embedding_scale = 1.0f;
  bool sandwich_norms = false;
  Activation activation = Activation::kSilu;
  // Attention scores are q.k times this: 1 / sqrt(head_dim), or Gemma's
  // 1 / sqrt(query_pre_attn_scalar).
  float attention_scale = 0;
  // Gemma 2: scores, and the logits, soft-capped to cap * tanh(x / cap); 0: not capped.
  float attn_logit_softcap = 0;
  float final_logit_softcap = 0;
  // Per layer, the keys a query sees: 0, every earlier position; w > 0, the last w positions up
  // to its own (Mistral's sliding_window on every layer, Qwen's from max_window_layers on with
  // use_sliding_window, Gemma 3's local layers; `layer_types` where a config lists them). Empty
  // when every layer is global.
  std::vector<int32_t> layer_windows;
  // The rope base of the windowed layers (Gemma 3's rope_local_base_freq, never scaled); 0: the
  // windowed layers use rope_theta and rope_scaling like the others.
  float rope_local_theta = 0;
  int32_t LayerWindow(int32_t layer) const {
    return layer_windows.empty() ? 0 : layer_windows[static_cast<size_t>(layer)];
  }
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  // Weight parameters, for memory planning and the bandwidth benchmark.
  int64_t ParameterCount() const;
  // fp32 K and V bytes one token occupies in the KV cache across all layers.
  int64_t KvBytesPerToken() const { return int64_t{2} * num_layers * kv_dim() * 4; }
};

// Parses and validates `config.json` text; `file` names it in errors
// ("/m/config.json: num_key_value_heads 3 must divide num_attention_heads 8").
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view file);

// The most a config.json or generation_config.json may hold: real ones are a few KiB, so a
// larger file is the wrong file.
inline constexpr size_t kMaxModelConfigBytes = size_t{16} << 20;

// Reads `<dir>/config.json`, and `<dir>/generation_config.json` when present for eos ids.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

}  // namespace exa::engine
