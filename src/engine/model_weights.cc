#include "engine/model_weights.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/dtype.h"
#include "nlohmann/json.hpp"

namespace exa::engine {
namespace {

using nlohmann::json;

// Reads the index's weight_map and returns the distinct shard file names it references.
absl::StatusOr<std::vector<std::string>> ReadShardIndex(const std::string& index_path) {
  // The index names every tensor once: a few MiB for the largest checkpoints.
  constexpr size_t kMaxIndexBytes = size_t{64} << 20;
  EXA_ASSIGN_OR_RETURN(std::string text, ReadFile(index_path, kMaxIndexBytes));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        StrCat(index_path, ": weight_map is missing or not an object"));
  }
  std::set<std::string> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return absl::InvalidArgumentError(
          StrCat(index_path, ": weight_map[\"", it.key(), "\"] must be a file name"));
    }
    std::string f = it.value().get<std::string>();
    // Shards live beside the index: refuse paths that could escape the model directory.
    if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos) {
      return absl::InvalidArgumentError(StrCat(index_path, ": weight_map[\"", it.key(), "\"] = \"",
                                               f, "\" is not a plain file name"));
    }
    files.insert(f);
  }
  if (files.empty()) return absl::InvalidArgumentError(StrCat(index_path, ": weight_map is empty"));
  return std::vector<std::string>(files.begin(), files.end());
}

// Rows [first, first + count) of the 2-d `view`: rows are contiguous, so a view of its own.
TensorView Rows(const TensorView& view, int64_t first, int64_t count) {
  const size_t row_bytes = static_cast<size_t>(view.shape[1]) * DTypeBytes(view.dtype);
  TensorView rows = view;
  rows.shape = {count, view.shape[1]};
  rows.data = static_cast<const uint8_t*>(view.data) + static_cast<size_t>(first) * row_bytes;
  rows.bytes = static_cast<size_t>(count) * row_bytes;
  return rows;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& dir,
                                                                 const ModelConfig& config) {
  auto w = std::unique_ptr<ModelWeights>(new ModelWeights());
  std::vector<std::string> names = {"model.safetensors"};
  const std::string index = dir + "/model.safetensors.index.json";
  if (std::filesystem::exists(index)) {
    EXA_ASSIGN_OR_RETURN(names, ReadShardIndex(index));
  }
  // Every shard is read in and mapped before the replica can be ready (in parallel, one shard
  // per core): the first request does not wait for page faults or the disk.
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back(dir + "/" + name);
  EXA_ASSIGN_OR_RETURN(auto mapped, MapFilesResident(paths));
  for (size_t i = 0; i < paths.size(); ++i) {
    EXA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::FromMapped(paths[i], std::move(mapped[i])));
    for (const auto& [tensor, view] : file->tensors()) {
      auto [it, inserted] = w->all_.emplace(tensor, std::make_pair(view, file->path()));
      if (!inserted) {
        return absl::InvalidArgumentError(
            StrCat(file->path(), ": tensor \"", tensor, "\" also appears in ", it->second.second));
      }
    }
    w->files_.push_back(std::move(file));
  }
  EXA_RETURN_IF_ERROR(w->Bind(config));
  return w;
}

absl::Status ModelWeights::Get(const std::string& name, std::vector<int64_t> shape,
                               TensorView* out) {
  auto it = all_.find(name);
  if (it == all_.end()) {
    return absl::InvalidArgumentError(StrCat("checkpoint: tensor \"", name, "\" is missing"));
  }
  const auto& [view, file] = it->second;
  if (view.shape != shape) {
    auto dims = [](const std::vector<int64_t>& s) {
      std::string out = "[";
      for (size_t i = 0; i < s.size(); ++i) StrAppend(&out, i ? ", " : "", s[i]);
      return out + "]";
    };
    return absl::InvalidArgumentError(StrCat(file, ": tensor \"", name,
                                             "\" field shape: ", dims(view.shape),
                                             " does not match config.json (", dims(shape), ")"));
  }
  *out = view;
  bytes_ += view.bytes;
  return absl::OkStatus();
}

absl::Status ModelWeights::Bind(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  // Where the language model's tensors sit: under "model." (text checkpoints), or, in Gemma 3's
  // multimodal ones, "language_model.model." (as published) or "model.language_model." (as
  // newer transformers saves them); their vision tower is not read.
  std::string root = "model.", head = "lm_head.weight";
  if (!all_.contains("model.embed_tokens.weight")) {
    if (all_.contains("language_model.model.embed_tokens.weight")) {
      root = "language_model.model.";
      head = "language_model.lm_head.weight";
    } else if (all_.contains("model.language_model.embed_tokens.weight")) {
      root = "model.language_model.";
    }
  }
  EXA_RETURN_IF_ERROR(Get(root + "embed_tokens.weight", {c.vocab_size, h}, &embed_tokens_));
  EXA_RETURN_IF_ERROR(Get(root + "norm.weight", {h}, &final_norm_));
  if (c.tie_word_embeddings && !all_.contains(head)) {
    lm_head_ = embed_tokens_;
  } else {
    EXA_RETURN_IF_ERROR(Get(head, {c.vocab_size, h}, &lm_head_));
  }
  layers_.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    EXA_RETURN_IF_ERROR(BindLayer(c, StrCat(root, "layers.", i, "."), layers_[i]));
  }
  if (!c.norm_weight_offset) return absl::OkStatus();
  OffsetNorm(&final_norm_);
  for (LayerWeights& l : layers_) {
    for (TensorView* norm : {&l.input_norm, &l.post_attention_norm, &l.pre_feedforward_norm,
                             &l.post_feedforward_norm, &l.q_norm, &l.k_norm}) {
      if (norm->data != nullptr) OffsetNorm(norm);
    }
  }
  return absl::OkStatus();
}

absl::Status ModelWeights::BindLayer(const ModelConfig& c, const std::string& p, LayerWeights& l) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), inter = c.intermediate_size;
  EXA_RETURN_IF_ERROR(Get(p + "input_layernorm.weight", {h}, &l.input_norm));
  EXA_RETURN_IF_ERROR(Get(p + "post_attention_layernorm.weight", {h}, &l.post_attention_norm));
  if (c.fused_projections) {  // Phi-3: rows [q | k | v] and [gate | up] of one tensor each
    TensorView qkv, gate_up;
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.qkv_proj.weight", {q + 2 * kv, h}, &qkv));
    EXA_RETURN_IF_ERROR(Get(p + "mlp.gate_up_proj.weight", {2 * inter, h}, &gate_up));
    l.q = Rows(qkv, 0, q);
    l.k = Rows(qkv, q, kv);
    l.v = Rows(qkv, q + kv, kv);
    l.gate = Rows(gate_up, 0, inter);
    l.up = Rows(gate_up, inter, inter);
  } else {
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.q_proj.weight", {q, h}, &l.q));
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.k_proj.weight", {kv, h}, &l.k));
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.v_proj.weight", {kv, h}, &l.v));
    EXA_RETURN_IF_ERROR(Get(p + "mlp.gate_proj.weight", {inter, h}, &l.gate));
    EXA_RETURN_IF_ERROR(Get(p + "mlp.up_proj.weight", {inter, h}, &l.up));
  }
  EXA_RETURN_IF_ERROR(Get(p + "self_attn.o_proj.weight", {h, q}, &l.o));
  if (c.qkv_bias) {
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.q_proj.bias", {q}, &l.q_bias));
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.k_proj.bias", {kv}, &l.k_bias));
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.v_proj.bias", {kv}, &l.v_bias));
  }
  if (c.qk_norm) {
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.q_norm.weight", {c.head_dim}, &l.q_norm));
    EXA_RETURN_IF_ERROR(Get(p + "self_attn.k_norm.weight", {c.head_dim}, &l.k_norm));
  }
  if (c.sandwich_norms) {
    EXA_RETURN_IF_ERROR(Get(p + "pre_feedforward_layernorm.weight", {h}, &l.pre_feedforward_norm));
    EXA_RETURN_IF_ERROR(
        Get(p + "post_feedforward_layernorm.weight", {h}, &l.post_feedforward_norm));
  }
  return Get(p + "mlp.down_proj.weight", {h, inter}, &l.down);
}

std::vector<const TensorView*> ModelWeights::Tensors() const {
  std::vector<const TensorView*> out = {&embed_tokens_, &final_norm_, &lm_head_};
  for (const LayerWeights& l : layers_) {
    for (const TensorView* t :
         {&l.input_norm, &l.q, &l.k, &l.v, &l.o, &l.q_bias, &l.k_bias, &l.v_bias, &l.q_norm,
          &l.k_norm, &l.post_attention_norm, &l.pre_feedforward_norm, &l.post_feedforward_norm,
          &l.gate, &l.up, &l.down}) {
      if (t->data != nullptr) out.push_back(t);
    }
  }
  return out;
}

void ModelWeights::OffsetNorm(TensorView* view) {
  // Gemma's RMSNorm computes x_normed * (1 + w) in fp32: the same products as x_normed * w' with
  // w' = 1 + w rounded to fp32 once.
  const int64_t n = view->NumElements();
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w[i] = ElementToF32(view->data, view->dtype, i) + 1.0f;
  bytes_ += static_cast<size_t>(n) * sizeof(float) - view->bytes;
  view->dtype = DType::kF32;
  view->data = w.data();
  view->bytes = static_cast<size_t>(n) * sizeof(float);
  owned_.push_back(std::move(w));  // the vector's buffer moves with it; the view stays valid
}

}  // namespace exa::engine
