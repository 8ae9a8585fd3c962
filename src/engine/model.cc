#include "engine/model.h"

#include <cmath>
#include <numbers>

#include "common/status.h"
#include "common/strings.h"

namespace exa::engine {

std::vector<float> RopeInverseFrequencies(const ModelConfig& c, bool local) {
  const int32_t half = c.head_dim / 2;
  std::vector<float> inv(half);
  const float theta = local && c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta;
  for (int32_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = 1.0f / std::pow(theta, exponent);
  }
  if (local && c.rope_local_theta > 0) return inv;  // Gemma 3's local layers: never scaled
  if (c.rope_scaling == RopeScaling::kLinear) {
    for (float& f : inv) f /= c.rope_factor;
    return inv;
  }
  if (c.rope_scaling != RopeScaling::kLlama3) return inv;
  // transformers' _compute_llama3_parameters: long wavelengths are slowed by `factor`, short ones
  // kept, the band between interpolated.
  const float old_len = static_cast<float>(c.rope_original_max_positions);
  const float low_wavelen = old_len / c.rope_low_freq_factor;
  const float high_wavelen = old_len / c.rope_high_freq_factor;
  for (float& f : inv) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    float scaled = wavelen > low_wavelen ? f / c.rope_factor : f;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = (old_len / wavelen - c.rope_low_freq_factor) /
                           (c.rope_high_freq_factor - c.rope_low_freq_factor);
      scaled = (1 - smooth) * scaled / c.rope_factor + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config,
                                                     const ModelWeights& weights, Backend* backend,
                                                     ModelLimits limits) {
  if (limits.max_step_tokens <= 0 || limits.max_logit_rows <= 0) {
    return absl::InvalidArgumentError("model limits must be positive");
  }
  auto m = std::unique_ptr<Model>(new Model(config, backend, limits));
  m->inv_freq_ = RopeInverseFrequencies(config);
  if (config.rope_local_theta > 0) m->local_inv_freq_ = RopeInverseFrequencies(config, true);
  EXA_RETURN_IF_ERROR(m->Upload(weights));
  EXA_RETURN_IF_ERROR(m->AllocateActivations());
  return m;
}

absl::Status Model::Upload(const ModelWeights& w) {
  EXA_ASSIGN_OR_RETURN(embed_, backend_->UploadWeight(w.embed_tokens()));
  EXA_ASSIGN_OR_RETURN(final_norm_, backend_->UploadWeight(w.final_norm()));
  EXA_ASSIGN_OR_RETURN(lm_head_, backend_->UploadWeight(w.lm_head()));
  for (const LayerWeights& lw : w.layers()) {
    Layer l;
    EXA_ASSIGN_OR_RETURN(l.input_norm, backend_->UploadWeight(lw.input_norm));
    EXA_ASSIGN_OR_RETURN(l.q, backend_->UploadWeight(lw.q));
    EXA_ASSIGN_OR_RETURN(l.k, backend_->UploadWeight(lw.k));
    EXA_ASSIGN_OR_RETURN(l.v, backend_->UploadWeight(lw.v));
    EXA_ASSIGN_OR_RETURN(l.o, backend_->UploadWeight(lw.o));
    if (config_.qkv_bias) {
      EXA_ASSIGN_OR_RETURN(l.q_bias, backend_->UploadWeight(lw.q_bias));
      EXA_ASSIGN_OR_RETURN(l.k_bias, backend_->UploadWeight(lw.k_bias));
      EXA_ASSIGN_OR_RETURN(l.v_bias, backend_->UploadWeight(lw.v_bias));
    }
    if (config_.qk_norm) {
      EXA_ASSIGN_OR_RETURN(l.q_norm, backend_->UploadWeight(lw.q_norm));
      EXA_ASSIGN_OR_RETURN(l.k_norm, backend_->UploadWeight(lw.k_norm));
    }
    EXA_ASSIGN_OR_RETURN(l.post_norm, backend_->UploadWeight(lw.post_attention_norm));
    if (config_.sandwich_norms) {
      EXA_ASSIGN_OR_RETURN(l.pre_ff_norm, backend_->UploadWeight(lw.pre_feedforward_norm));
      EXA_ASSIGN_OR_RETURN(l.post_ff_norm, backend_->UploadWeight(lw.post_feedforward_norm));
    }
    EXA_ASSIGN_OR_RETURN(l.gate, backend_->UploadWeight(lw.gate));
    EXA_ASSIGN_OR_RETURN(l.up, backend_->UploadWeight(lw.up));
    EXA_ASSIGN_OR_RETURN(l.down, backend_->UploadWeight(lw.down));
    layers_.push_back(l);
  }
  return absl::OkStatus();
}

absl::Status Model::AllocateActivations() {
  const int64_t t = limits_.max_step_tokens, s = limits_.max_logit_rows;
  const ModelConfig& c = config_;
  EXA_ASSIGN_OR_RETURN(act_.x, backend_->Allocate(t, c.hidden_size));
  EXA_ASSIGN_OR_RETURN(act_.normed, backend_->Allocate(t, c.hidden_size));
  EXA_ASSIGN_OR_RETURN(act_.q, backend_->Allocate(t, c.q_dim()));
  EXA_ASSIGN_OR_RETURN(act_.k, backend_->Allocate(t, c.kv_dim()));
  EXA_ASSIGN_OR_RETURN(act_.v, backend_->Allocate(t, c.kv_dim()));
  EXA_ASSIGN_OR_RETURN(act_.attn, backend_->Allocate(t, c.q_dim()));
  EXA_ASSIGN_OR_RETURN(act_.proj, backend_->Allocate(t, c.hidden_size));
  EXA_ASSIGN_OR_RETURN(act_.gate, backend_->Allocate(t, c.intermediate_size));
  EXA_ASSIGN_OR_RETURN(act_.up, backend_->Allocate(t, c.intermediate_size));
  EXA_ASSIGN_OR_RETURN(act_.selected, backend_->Allocate(s, c.hidden_size));
  EXA_ASSIGN_OR_RETURN(act_.selected_normed, backend_->Allocate(s, c.hidden_size));
  EXA_ASSIGN_OR_RETURN(act_.logits, backend_->Allocate(s, c.vocab_size));
  return absl::OkStatus();
}

void Model::RunLayer(int32_t index, int64_t n, const BatchLayout& layout) {
  const Layer& l = layers_[index];
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  Buffer x = act_.x.Rows(n), normed = act_.normed.Rows(n), q = act_.q.Rows(n);
  Buffer k = act_.k.Rows(n), v = act_.v.Rows(n), attn = act_.attn.Rows(n);
  Buffer proj = act_.proj.Rows(n), gate = act_.gate.Rows(n), up = act_.up.Rows(n);

  b.RmsNorm(x, l.input_norm, c.rms_norm_eps, normed);
  const MatMulTarget qkv[] = {{&l.q, &l.q_bias, q}, {&l.k, &l.k_bias, k}, {&l.v, &l.v_bias, v}};
  b.MatMulShared(normed, qkv);
  if (c.qk_norm) {  // each head's row of head_dim on its own (in place)
    const Buffer q_heads{q.data, n * c.num_heads, c.head_dim};
    const Buffer k_heads{k.data, n * c.num_kv_heads, c.head_dim};
    b.RmsNorm(q_heads, l.q_norm, c.rms_norm_eps, q_heads);
    b.RmsNorm(k_heads, l.k_norm, c.rms_norm_eps, k_heads);
  }
  const int32_t window = c.LayerWindow(index);
  b.Rope(q, k, c.head_dim, window > 0 && !local_inv_freq_.empty() ? local_inv_freq_ : inv_freq_,
         layout);
  b.StoreKv(index, k, v, layout);
  b.Attention(index, q,
              AttentionParams{c.num_heads, c.num_kv_heads, c.head_dim, limits_.kv_block_size,
                              c.attention_scale, c.attn_logit_softcap, window},
              layout, attn);
  if (!c.sandwich_norms) {
    b.MatMulAdd(attn, l.o, proj, x);
    b.RmsNorm(x, l.post_norm, c.rms_norm_eps, normed);
    GatedMlp(l, normed, gate, up);
    b.MatMulAdd(gate, l.down, proj, x);
    return;
  }
  // Gemma 2 and 3: each block's output normalised before it joins the residual stream.
  b.MatMul(attn, l.o, nullptr, proj);
  b.RmsNorm(proj, l.post_norm, c.rms_norm_eps, proj);
  b.Add(x, proj);
  b.RmsNorm(x, l.pre_ff_norm, c.rms_norm_eps, normed);
  GatedMlp(l, normed, gate, up);
  b.MatMul(gate, l.down, nullptr, proj);
  b.RmsNorm(proj, l.post_ff_norm, c.rms_norm_eps, proj);
  b.Add(x, proj);
}

void Model::GatedMlp(const Layer& l, Buffer normed, Buffer gate, Buffer up) {
  Backend& b = *backend_;
  const MatMulTarget gate_up[] = {{&l.gate, nullptr, gate}, {&l.up, nullptr, up}};
  b.MatMulShared(normed, gate_up);
  if (config_.activation == Activation::kGeluTanh) {
    b.GeluTanhMul(gate, up, gate);
  } else {
    b.SiluMul(gate, up, gate);
  }
}

absl::Status Model::RunToLogits(std::span<const int32_t> tokens, const BatchLayout& layout,
                                std::span<const int32_t> logit_rows,
                                std::span<const DeviceSampling> sampling) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n > limits_.max_step_tokens ||
      logit_rows.size() > static_cast<size_t>(limits_.max_logit_rows)) {
    return absl::InvalidArgumentError(StrCat("step of ", n, " tokens and ", logit_rows.size(),
                                             " logit rows exceeds the model limits"));
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          StrCat("token id ", id, " is outside the vocabulary of ", config_.vocab_size));
    }
  }
  backend_->BeginStep(tokens, layout, logit_rows, sampling);
  backend_->Embedding(embed_, tokens, act_.x.Rows(n));
  if (config_.embedding_scale != 1.0f) backend_->Scale(act_.x.Rows(n), config_.embedding_scale);
  for (int32_t i = 0; i < config_.num_layers; ++i) RunLayer(i, n, layout);
  const int64_t s = static_cast<int64_t>(logit_rows.size());
  if (s == 0) return absl::OkStatus();
  backend_->GatherRows(act_.x.Rows(n), logit_rows, act_.selected.Rows(s));
  backend_->RmsNorm(act_.selected.Rows(s), final_norm_, config_.rms_norm_eps,
                    act_.selected_normed.Rows(s));
  backend_->MatMul(act_.selected_normed.Rows(s), lm_head_, nullptr, act_.logits.Rows(s));
  if (config_.final_logit_softcap > 0) {
    backend_->SoftCap(act_.logits.Rows(s), config_.final_logit_softcap);
  }
  return absl::OkStatus();
}

absl::Status Model::Forward(std::span<const int32_t> tokens, const BatchLayout& layout,
                            std::span<const int32_t> logit_rows, float* logits) {
  EXA_RETURN_IF_ERROR(RunToLogits(tokens, layout, logit_rows, {}));
  const int64_t s = static_cast<int64_t>(logit_rows.size());
  if (s > 0) backend_->CopyToHost(act_.logits.Rows(s), logits);
  return backend_->status();
}

absl::Status Model::ForwardSample(std::span<const int32_t> tokens, const BatchLayout& layout,
                                  std::span<const int32_t> logit_rows,
                                  std::span<const DeviceSampling> sampling, int32_t* sampled) {
  if (!backend_->can_sample_on_device()) {
    return absl::FailedPreconditionError(
        StrCat("backend ", backend_->name(), " cannot sample on the device"));
  }
  if (sampling.size() != logit_rows.size()) {
    return absl::InvalidArgumentError(
        StrCat(sampling.size(), " sampling rows for ", logit_rows.size(), " logit rows"));
  }
  EXA_RETURN_IF_ERROR(RunToLogits(tokens, layout, logit_rows, sampling));
  const int64_t s = static_cast<int64_t>(logit_rows.size());
  if (s > 0) backend_->SampleRows(act_.logits.Rows(s), sampling, sampled);
  return backend_->status();
}

}  // namespace exa::engine
