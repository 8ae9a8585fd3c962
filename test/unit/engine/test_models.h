// Test helpers: write small random checkpoints in the Hugging Face layout, so tests exercise the
// real loader and forward pass without a committed model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/dtype.h"
#include "nlohmann/json.hpp"

namespace exa::engine::testing {

struct RawTensor {
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::string bytes;
};

// Serialises tensors as safetensors (8-byte length, JSON header, data).
inline std::string EncodeSafetensors(const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text + data;
}

inline std::string RandomBytes(int64_t count, DType dtype, std::mt19937& rng, float scale,
                               float offset = 0.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::string out;
  for (int64_t i = 0; i < count; ++i) {
    float f = dist(rng) + offset;
    if (dtype == DType::kF32) {
      out.append(reinterpret_cast<const char*>(&f), 4);
    } else {
      uint16_t h = dtype == DType::kF16 ? F32ToF16(f) : F32ToBf16(f);
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return out;
}

inline nlohmann::json SmallConfig() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 96},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"max_position_embeddings", 256},
          {"tie_word_embeddings", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

// A small Gemma 3 text model: sliding-window layers of 8 positions (every other layer) with their
// own rope base, a query_pre_attn_scalar other than head_dim, tied embeddings.
inline nlohmann::json SmallGemma3Config() {
  nlohmann::json c = SmallConfig();
  c["architectures"] = {"Gemma3ForCausalLM"};
  c["model_type"] = "gemma3_text";
  c["head_dim"] = 32;
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["query_pre_attn_scalar"] = 24;
  c["sliding_window"] = 8;
  c["sliding_window_pattern"] = 2;
  c["rope_theta"] = 1000000.0;
  c["rope_local_base_freq"] = 10000.0;
  c["rms_norm_eps"] = 1e-6;
  c.erase("tie_word_embeddings");  // Gemma 3's default: tied
  return c;
}

// All tensors of a random model for `config`, in `dtype`.
inline std::map<std::string, RawTensor> RandomTensors(const nlohmann::json& c, DType dtype,
                                                      uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t h = c["hidden_size"], v = c["vocab_size"], inter = c["intermediate_size"];
  const int64_t heads = c["num_attention_heads"], kvh = c["num_key_value_heads"];
  const int64_t hd = c.contains("head_dim") ? c["head_dim"].get<int64_t>() : h / heads;
  const bool bias = c["architectures"][0] == "Qwen2ForCausalLM";
  const bool gemma3 = c["architectures"][0] == "Gemma3ForCausalLM";
  const bool gemma = gemma3 || c["architectures"][0] == "Gemma2ForCausalLM";
  const bool phi3 = c["architectures"][0] == "Phi3ForCausalLM";
  const bool qk_norm = gemma3 || c["architectures"][0] == "Qwen3ForCausalLM";
  const float norm_offset = gemma ? 0.0f : 1.0f;  // Gemma's norms multiply by 1 + w
  const char* dt = dtype == DType::kF32 ? "F32" : dtype == DType::kF16 ? "F16" : "BF16";
  std::map<std::string, RawTensor> t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale,
                 float offset = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t[name] = RawTensor{dt, shape, RandomBytes(n, dtype, rng, scale, offset)};
  };
  add("model.embed_tokens.weight", {v, h}, 1.0f);
  add("model.norm.weight", {h}, 0.1f, norm_offset);
  if (!c.value("tie_word_embeddings", gemma)) add("lm_head.weight", {v, h}, 0.2f);
  for (int i = 0; i < c["num_hidden_layers"].get<int>(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}, 0.1f, norm_offset);
    add(p + "post_attention_layernorm.weight", {h}, 0.1f, norm_offset);
    if (gemma) {
      add(p + "pre_feedforward_layernorm.weight", {h}, 0.1f, norm_offset);
      add(p + "post_feedforward_layernorm.weight", {h}, 0.1f, norm_offset);
    }
    if (phi3) {
      add(p + "self_attn.qkv_proj.weight", {(heads + 2 * kvh) * hd, h}, 0.2f);
      add(p + "mlp.gate_up_proj.weight", {2 * inter, h}, 0.2f);
    } else {
      add(p + "self_attn.q_proj.weight", {heads * hd, h}, 0.2f);
      add(p + "self_attn.k_proj.weight", {kvh * hd, h}, 0.2f);
      add(p + "self_attn.v_proj.weight", {kvh * hd, h}, 0.2f);
      add(p + "mlp.gate_proj.weight", {inter, h}, 0.2f);
      add(p + "mlp.up_proj.weight", {inter, h}, 0.2f);
    }
    add(p + "self_attn.o_proj.weight", {h, heads * hd}, 0.2f);
    if (bias) {
      add(p + "self_attn.q_proj.bias", {heads * hd}, 0.2f);
      add(p + "self_attn.k_proj.bias", {kvh * hd}, 0.2f);
      add(p + "self_attn.v_proj.bias", {kvh * hd}, 0.2f);
    }
    if (qk_norm) {
      add(p + "self_attn.q_norm.weight", {hd}, 0.1f, norm_offset);
      add(p + "self_attn.k_norm.weight", {hd}, 0.1f, norm_offset);
    }
    add(p + "mlp.down_proj.weight", {h, inter}, 0.2f);
  }
  return t;
}

inline void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

// Removes the test's temporary directories when the test binary exits.
struct TempDirRegistry {
  std::vector<std::filesystem::path> dirs;
  ~TempDirRegistry() {
    std::error_code ignored;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ignored);
  }
};
inline TempDirRegistry& TempDirs() {
  static TempDirRegistry registry;
  return registry;
}

// A fresh directory under the system temp dir, unique per call, removed at exit.
inline std::filesystem::path TempDir(const std::string& tag) {
  static int counter = 0;
  auto dir =
      std::filesystem::temp_directory_path() /
      ("exa-engine-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TempDirs().dirs.push_back(dir);
  return dir;
}

// Writes config.json + model.safetensors of a random model; returns the directory.
inline std::filesystem::path WriteRandomModel(const std::string& tag,
                                              const nlohmann::json& config = SmallConfig(),
                                              DType dtype = DType::kF32, uint32_t seed = 7) {
  auto dir = TempDir(tag);
  WriteFile(dir / "config.json", config.dump());
  WriteFile(dir / "model.safetensors", EncodeSafetensors(RandomTensors(config, dtype, seed)));
  return dir;
}

}  // namespace exa::engine::testing
