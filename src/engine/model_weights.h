// The checkpoint of one model: every tensor the forward pass needs, located in one
// `model.safetensors` or in the shards named by `model.safetensors.index.json`, and checked
// against the ModelConfig (names present, shapes equal, dtypes supported). Views point into the
// mapped files, apart from Gemma's norm weights, which are held here as 1 + w.
//
// Thread safety: immutable after Load(); views stay valid while the ModelWeights lives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace exa::engine {

struct LayerWeights {
  TensorView input_norm;              // [hidden]
  TensorView q, k, v, o;              // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  TensorView q_bias, k_bias, v_bias;  // present when config.qkv_bias
  TensorView q_norm, k_norm;          // present when config.qk_norm
  TensorView post_attention_norm;     // [hidden]
  // Present when config.sandwich_norms (Gemma 3): the MLP input's and output's norms;
  // post_attention_norm is then the attention output's.
  TensorView pre_feedforward_norm, post_feedforward_norm;
  TensorView gate, up, down;  // [inter, hidden] x2, [hidden, inter]
};

class ModelWeights {
 public:
  // Opens `<dir>/model.safetensors.index.json` and its shards if the index exists, else
  // `<dir>/model.safetensors`.
  static absl::StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& dir,
                                                            const ModelConfig& config);

  const TensorView& embed_tokens() const { return embed_tokens_; }
  const TensorView& final_norm() const { return final_norm_; }
  // The embedding table itself when word embeddings are tied.
  const TensorView& lm_head() const { return lm_head_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Every tensor the forward pass reads, in a fixed order: the embedding, the final norm, the
  // output head (the embedding again when tied), then each layer's present ones.
  std::vector<const TensorView*> Tensors() const;
  // Bytes of all weights the forward pass reads once per decode step.
  size_t bytes() const { return bytes_; }

 private:
  absl::Status Bind(const ModelConfig& config);
  // Layer tensors under the name prefix `p` ("model.layers.3.").
  absl::Status BindLayer(const ModelConfig& config, const std::string& p, LayerWeights& layer);
  // all_[name] into `out`, checked against `shape`.
  absl::Status Get(const std::string& name, std::vector<int64_t> shape, TensorView* out);

  // A norm weight w stored as an offset (config.norm_weight_offset) replaced by 1 + w in fp32,
  // computed once here so every backend's RmsNorm serves it unchanged.
  void OffsetNorm(TensorView* view);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::vector<float>> owned_;  // the 1 + w copies the views point into
  std::map<std::string, std::pair<TensorView, std::string>> all_;  // name -> (view, file)
  TensorView embed_tokens_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  size_t bytes_ = 0;
};

}  // namespace exa::engine
