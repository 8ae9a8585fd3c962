// The LLaMA-family forward pass (Llama, Mistral, Qwen2, Qwen3, Gemma 3) written once against the
// Backend interface: embedding, then per layer RMSNorm -> q/k/v (+bias) -> RoPE -> paged-KV
// attention -> o_proj + residual -> RMSNorm -> SiLU-gated MLP + residual, then the final norm and
// logits for the rows that sample. Gemma 3 differs by its config's switches (model_config.h):
// a scaled embedding, per-head q/k norms, sliding-window layers with their own rope base,
// outputs normalised before each residual add, and a GELU gate.
//
// One Forward() call is one engine step: any mix of prefill chunks and decode tokens from many
// sequences, flattened into one token list (BatchLayout says where each token belongs).
//
// Thread safety: one thread at a time (the engine thread), like the Backend it drives.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace exa::engine {

struct ModelLimits {
  int32_t max_step_tokens = 512;  // tokens in one Forward
  int32_t max_logit_rows = 64;    // rows that get logits in one Forward
  int32_t kv_block_size = 16;     // tokens per paged KV cache block
};

// RoPE inverse frequencies (head_dim / 2 of them), with llama3 or linear scaling applied when
// configured, computed in fp32 as Hugging Face transformers does; `local`: those of the
// sliding-window layers when they have their own base (config.rope_local_theta, unscaled).
std::vector<float> RopeInverseFrequencies(const ModelConfig& config, bool local = false);

class Model {
 public:
  // Uploads every weight to `backend` and allocates the activations; the KV cache is allocated
  // separately (Backend::AllocateKvCache) because its size is the replica's byte budget.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config,
                                                       const ModelWeights& weights,
                                                       Backend* backend, ModelLimits limits);

  const ModelConfig& config() const { return config_; }
  const ModelLimits& limits() const { return limits_; }

  // Runs `tokens` (positions, slots and block tables in `layout`) and writes the logits of
  // token rows `logit_rows` to `logits` ([logit_rows.size(), vocab_size] floats, host memory).
  absl::Status Forward(std::span<const int32_t> tokens, const BatchLayout& layout,
                       std::span<const int32_t> logit_rows, float* logits);
  // As Forward, but the backend picks each logit row's token with `sampling[i]` where the logits
  // are (Backend::can_sample_on_device()) and writes the ids to `sampled` (host memory); the
  // logits never reach the host.
  absl::Status ForwardSample(std::span<const int32_t> tokens, const BatchLayout& layout,
                             std::span<const int32_t> logit_rows,
                             std::span<const DeviceSampling> sampling, int32_t* sampled);

 private:
  struct Layer {
    Weight input_norm, q, k, v, o, q_bias, k_bias, v_bias, q_norm, k_norm, post_norm, pre_ff_norm,
        post_ff_norm, gate, up, down;
  };
  struct Activations {
    Buffer x, normed, q, k, v, attn, proj, gate, up, selected, selected_normed, logits;
  };

  Model(const ModelConfig& config, Backend* backend, ModelLimits limits)
      : config_(config), backend_(backend), limits_(limits) {}
  absl::Status Upload(const ModelWeights& weights);
  absl::Status AllocateActivations();
  void RunLayer(int32_t index, int64_t tokens, const BatchLayout& layout);
  // The MLP's gated product of normed [n, hidden] into gate, up as scratch; the down projection
  // is the caller's.
  void GatedMlp(const Layer& l, Buffer normed, Buffer gate, Buffer up);
  // Everything up to the logits of `logit_rows` in act_.logits; the row count through `rows`.
  absl::Status RunToLogits(std::span<const int32_t> tokens, const BatchLayout& layout,
                           std::span<const int32_t> logit_rows,
                           std::span<const DeviceSampling> sampling);

  ModelConfig config_;
  Backend* backend_;
  ModelLimits limits_;
  std::vector<float> inv_freq_;
  std::vector<float> local_inv_freq_;  // the sliding-window layers' (rope_local_theta), or empty
  Weight embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  Activations act_;
};

}  // namespace exa::engine
