// Proves the config parser and safetensors loader accept real layouts and reject hostile or
// inconsistent files with an error naming the file and the field, never reading out of bounds.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "common/strings.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/safetensors.h"
#include "test_models.h"

namespace exa::engine {
namespace {

using testing::EncodeSafetensors;
using testing::RawTensor;

std::string Message(const absl::Status& s) { return std::string(ToStd(s.message())); }

absl::Status ParseImage(const std::string& image) {
  return ParseSafetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "x.st")
      .status();
}

std::string WithHeader(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST_CASE("a random model loads with every tensor bound and shaped", "[engine][loader]") {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto dir = testing::WriteRandomModel("load", testing::SmallConfig(), dt);
    auto config = LoadModelConfig(dir.string());
    REQUIRE(config.ok());
    CHECK(config->head_dim == 16);
    CHECK(config->eos_token_ids == std::vector<int32_t>{2});
    auto weights = ModelWeights::Load(dir.string(), *config);
    REQUIRE(weights.ok());
    CHECK((*weights)->layers().size() == 2);
    CHECK((*weights)->layers()[1].k.shape == std::vector<int64_t>{32, 64});
    CHECK((*weights)->layers()[0].q.dtype == dt);
    CHECK((*weights)->bytes() == static_cast<size_t>(config->ParameterCount()) * DTypeBytes(dt));
  }
}

TEST_CASE("hostile safetensors headers are rejected precisely", "[engine][loader]") {
  const std::string four_floats(16, '\0');
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offs) {
    return "{\"t\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offs +
           "}}";
  };
  struct Case {
    std::string image;
    std::string expect;
  } cases[] = {
      {"", "too short"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8), "header length"},
      {WithHeader("{\"t\":", four_floats), "not a JSON object"},
      {WithHeader(entry("I8", "[4]", "[0,4]"), four_floats), "field dtype"},
      {WithHeader(entry("F32", "[4]", "[0,32]"), four_floats), "not inside the data section"},
      {WithHeader(entry("F32", "[4]", "[8,4]"), four_floats), "not inside the data section"},
      {WithHeader(entry("F32", "[3]", "[0,16]"), four_floats), "does not match shape"},
      {WithHeader(entry("F32", "[-1]", "[0,16]"), four_floats), "field shape"},
      {WithHeader(entry("F32", "[4611686018427387904,4]", "[0,16]"), four_floats), "field shape"},
      {WithHeader(entry("F32", "[1,2,3,4,5,6,7,8,9]", "[0,16]"), four_floats), "field shape"},
      {WithHeader(entry("F32", "4", "[0,16]"), four_floats), "field shape"},
      {WithHeader(entry("F32", "[4]", "[0]"), four_floats), "field data_offsets"},
      {WithHeader("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                  four_floats),
       "overlaps"},
  };
  for (const Case& c : cases) {
    absl::Status s = ParseImage(c.image);
    INFO(Message(s));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Message(s).find(c.expect) != std::string::npos);
    CHECK(Message(s).find("x.st") != std::string::npos);
  }
}

TEST_CASE("every truncation of a valid file is rejected, never read past", "[engine][loader]") {
  std::map<std::string, RawTensor> tensors;
  tensors["a"] = RawTensor{"F32", {2, 2}, std::string(16, '\1')};
  tensors["b"] = RawTensor{"BF16", {3}, std::string(6, '\2')};
  const std::string image = EncodeSafetensors(tensors);
  REQUIRE(ParseImage(image).ok());
  for (size_t n = 0; n < image.size(); ++n) {
    std::string cut = image.substr(0, n);  // a copy sized exactly n: ASan would see overreads
    CHECK_FALSE(ParseImage(cut).ok());
  }
}

TEST_CASE("config.json errors name the field and the allowed values", "[engine][loader]") {
  auto parse = [](nlohmann::json j) { return ParseModelConfig(j.dump(), "m/config.json"); };
  auto c = testing::SmallConfig();
  REQUIRE(parse(c).ok());
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* expect;
  } cases[] = {
      {"architectures", {"GPT2LMHeadModel"}, "not supported"},
      {"num_key_value_heads", 3, "must divide num_attention_heads 4"},
      {"hidden_size", nullptr, "hidden_size is missing"},
      {"hidden_size", "64", "must be an integer"},
      {"vocab_size", -5, "out of range"},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "not supported"},
      {"hidden_act", "gelu", "not supported"},
      {"eos_token_id", 1000, "not a token id"},
  };
  for (const Case& k : cases) {
    auto bad = c;
    if (k.value.is_null()) {
      bad.erase(k.field);
    } else {
      bad[k.field] = k.value;
    }
    auto r = parse(bad);
    REQUIRE_FALSE(r.ok());
    INFO(Message(r.status()));
    CHECK(Message(r.status()).find("m/config.json") != std::string::npos);
    CHECK(Message(r.status()).find(k.expect) != std::string::npos);
  }
  auto mistral = c;
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["sliding_window"] = 128;
  auto m = parse(mistral);
  REQUIRE(m.ok());
  CHECK(m->layer_windows == std::vector<int32_t>{128, 128});  // every layer slides
  CHECK(m->MaxContext() == 256);        // the window is a mask, not a cap on the context
  mistral["sliding_window"] = nullptr;  // Mistral 7B v0.2 on: global attention
  CHECK(parse(mistral)->layer_windows.empty());
  auto qwen = c;
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["sliding_window"] = 128;
  qwen["use_sliding_window"] = false;
  CHECK(parse(qwen)->MaxContext() == 256);
  auto qwen3 = qwen;
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  qwen3.erase("use_sliding_window");  // Qwen3 too: the window applies only when asked for
  auto q3 = parse(qwen3);
  REQUIRE(q3.ok());
  CHECK(q3->qk_norm);
  CHECK_FALSE(q3->qkv_bias);
  CHECK(q3->MaxContext() == 256);
  CHECK(q3->layer_windows.empty());
  CHECK_FALSE(parse(qwen)->qk_norm);
  auto windowed = qwen;
  windowed["use_sliding_window"] = true;
  windowed["max_window_layers"] = 1;  // Qwen2: layers from max_window_layers on slide
  CHECK(parse(windowed)->layer_windows == std::vector<int32_t>{0, 128});
  windowed["layer_types"] = {"sliding_attention", "full_attention"};  // listed: they decide
  CHECK(parse(windowed)->layer_windows == std::vector<int32_t>{128, 0});

  auto llama3 = c;
  llama3["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}};
  auto r = parse(llama3);
  REQUIRE(r.ok());
  CHECK(r->rope_scaling == RopeScaling::kLlama3);
  auto linear = c;
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto lin = parse(linear);
  REQUIRE(lin.ok());
  CHECK(lin->rope_scaling == RopeScaling::kLinear);
  CHECK(lin->rope_factor == 4.0f);
}

TEST_CASE("Gemma 3 configs: layer windows, scales and what is refused", "[engine][loader]") {
  auto parse = [](nlohmann::json j) { return ParseModelConfig(j.dump(), "m/config.json"); };
  const nlohmann::json g = testing::SmallGemma3Config();
  auto c = parse(g);
  REQUIRE(c.ok());
  CHECK(c->layer_windows == std::vector<int32_t>{8, 0});  // every 2nd layer global
  CHECK(c->MaxContext() == 256);  // the global layers see everything: no cap
  CHECK(c->tie_word_embeddings);
  CHECK(c->qk_norm);
  CHECK(c->norm_weight_offset);
  CHECK(c->sandwich_norms);
  CHECK(c->activation == Activation::kGeluTanh);
  CHECK(c->embedding_scale == Approx(8.0));  // sqrt(64)
  CHECK(c->attention_scale == Approx(1.0 / std::sqrt(24.0)));
  CHECK(c->rope_local_theta == 10000.0f);

  auto typed = g;
  typed["layer_types"] = {"full_attention", "sliding_attention"};
  auto t = parse(typed);
  REQUIRE(t.ok());
  CHECK(t->layer_windows == std::vector<int32_t>{0, 8});  // layer_types wins over the pattern

  struct Case {
    const char* field;
    nlohmann::json value;
    const char* expect;
  } cases[] = {
      {"attn_logit_softcapping", -1.0, "attn_logit_softcapping -1 is out of range"},
      {"hidden_activation", "gelu", "expected \"gelu_pytorch_tanh\""},
      {"layer_types", {"full_attention"}, "must list num_hidden_layers (2)"},
      {"layer_types", {"full_attention", "chunked"}, "layer_types[1] \"chunked\""},
      {"sliding_window", 0, "out of range"},
      {"use_bidirectional_attention", true, "not supported"},
  };
  for (const Case& k : cases) {
    auto bad = g;
    bad[k.field] = k.value;
    auto r = parse(bad);
    REQUIRE_FALSE(r.ok());
    INFO(Message(r.status()));
    CHECK(Message(r.status()).find(k.expect) != std::string::npos);
  }
  CHECK(c->attn_logit_softcap == 0);  // Gemma 3: not capped unless the config says so
  CHECK(c->final_logit_softcap == 0);

  auto gemma2 = g;  // Gemma 2: capped by default, the even layers slide, no q/k norms
  gemma2["architectures"] = {"Gemma2ForCausalLM"};
  gemma2.erase("sliding_window_pattern");
  auto g2 = parse(gemma2);
  REQUIRE(g2.ok());
  CHECK(g2->attn_logit_softcap == 50.0f);
  CHECK(g2->final_logit_softcap == 30.0f);
  CHECK(g2->layer_windows == std::vector<int32_t>{8, 0});
  CHECK_FALSE(g2->qk_norm);
  CHECK(g2->rope_local_theta == 0);  // one rope base for every layer
  CHECK(g2->sandwich_norms);
}

TEST_CASE("checkpoints inconsistent with config.json are rejected", "[engine][loader]") {
  auto config = ParseModelConfig(testing::SmallConfig().dump(), "config.json");
  REQUIRE(config.ok());
  auto dir = testing::TempDir("bad");
  auto tensors = testing::RandomTensors(testing::SmallConfig(), DType::kF32, 1);
  SECTION("wrong shape") {
    tensors["model.layers.1.mlp.up_proj.weight"].shape = {64, 96};
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(tensors));
    auto w = ModelWeights::Load(dir.string(), *config);
    REQUIRE_FALSE(w.ok());
    CHECK(Message(w.status()).find("model.layers.1.mlp.up_proj.weight") != std::string::npos);
    CHECK(Message(w.status()).find("does not match config.json") != std::string::npos);
  }
  SECTION("a Qwen3 checkpoint without its per-head q/k norms") {
    auto qwen3 = testing::SmallConfig();
    qwen3["architectures"] = {"Qwen3ForCausalLM"};
    auto q3 = ParseModelConfig(qwen3.dump(), "config.json");
    REQUIRE(q3.ok());
    auto q3_tensors = testing::RandomTensors(qwen3, DType::kBF16, 2);
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(q3_tensors));
    REQUIRE(ModelWeights::Load(dir.string(), *q3).ok());
    q3_tensors.erase("model.layers.0.self_attn.k_norm.weight");
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(q3_tensors));
    auto w = ModelWeights::Load(dir.string(), *q3);
    REQUIRE_FALSE(w.ok());
    CHECK(Message(w.status()).find("\"model.layers.0.self_attn.k_norm.weight\" is missing") !=
          std::string::npos);
  }
  SECTION("a Gemma 3 checkpoint: 1 + w norms, and without its feed-forward norms") {
    const nlohmann::json gemma = testing::SmallGemma3Config();
    auto g3 = ParseModelConfig(gemma.dump(), "config.json");
    REQUIRE(g3.ok());
    auto g3_tensors = testing::RandomTensors(gemma, DType::kBF16, 3);
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(g3_tensors));
    auto loaded = ModelWeights::Load(dir.string(), *g3);
    REQUIRE(loaded.ok());
    const TensorView& norm = (*loaded)->layers()[1].post_feedforward_norm;
    REQUIRE(norm.dtype == DType::kF32);  // held as 1 + w in fp32
    uint16_t stored;
    std::memcpy(&stored,
                g3_tensors["model.layers.1.post_feedforward_layernorm.weight"].bytes.data(), 2);
    CHECK(static_cast<const float*>(norm.data)[0] == 1.0f + Bf16ToF32(stored));
    CHECK((*loaded)->lm_head().data == (*loaded)->embed_tokens().data);  // tied
    g3_tensors.erase("model.layers.1.pre_feedforward_layernorm.weight");
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(g3_tensors));
    auto w = ModelWeights::Load(dir.string(), *g3);
    REQUIRE_FALSE(w.ok());
    CHECK(Message(w.status())
              .find("\"model.layers.1.pre_feedforward_layernorm.weight\" is missing") !=
          std::string::npos);
  }
  SECTION("Gemma 3's multimodal checkpoints serve their text model, in either name layout") {
    nlohmann::json text = testing::SmallGemma3Config();
    auto text_tensors = testing::RandomTensors(text, DType::kBF16, 4);
    text.erase("architectures");
    text.erase("eos_token_id");
    text.erase("max_position_embeddings");  // left to Gemma3TextConfig's default
    const nlohmann::json multimodal = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                       {"text_config", text},
                                       {"vision_config", {{"hidden_size", 32}}},
                                       {"eos_token_id", {1, 50}}};
    auto mm = ParseModelConfig(multimodal.dump(), "config.json");
    REQUIRE(mm.ok());
    CHECK(mm->eos_token_ids == std::vector<int32_t>{1, 50});  // from the top level
    CHECK(mm->MaxContext() == 131072);
    CHECK(mm->layer_windows == std::vector<int32_t>{8, 0});
    for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
      INFO(prefix);
      std::map<std::string, RawTensor> renamed;
      for (const auto& [name, t] : text_tensors) renamed[prefix + name.substr(6)] = t;
      renamed["vision_tower.vision_model.post_layernorm.weight"] =
          text_tensors["model.norm.weight"];
      testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(renamed));
      auto w = ModelWeights::Load(dir.string(), *mm);
      INFO(Message(w.status()));
      REQUIRE(w.ok());
      CHECK((*w)->layers().size() == 2);
    }
    auto no_text = multimodal;
    no_text.erase("text_config");
    auto r = ParseModelConfig(no_text.dump(), "config.json");
    REQUIRE_FALSE(r.ok());
    CHECK(Message(r.status()).find("text_config must be an object") != std::string::npos);
  }
  SECTION("a Phi-3 checkpoint: fused projections split into views, or named when wrong") {
    nlohmann::json phi = testing::SmallConfig();
    phi["architectures"] = {"Phi3ForCausalLM"};
    auto p3 = ParseModelConfig(phi.dump(), "config.json");
    REQUIRE(p3.ok());
    auto p3_tensors = testing::RandomTensors(phi, DType::kBF16, 5);
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(p3_tensors));
    auto loaded = ModelWeights::Load(dir.string(), *p3);
    REQUIRE(loaded.ok());
    const LayerWeights& l = (*loaded)->layers()[0];
    const auto* fused = static_cast<const uint8_t*>(l.q.data);
    CHECK(l.q.shape == std::vector<int64_t>{64, 64});
    CHECK(l.v.shape == std::vector<int64_t>{32, 64});  // 2 KV heads of 16
    CHECK(static_cast<const uint8_t*>(l.k.data) == fused + 64 * 64 * 2);
    CHECK(static_cast<const uint8_t*>(l.v.data) == fused + 96 * 64 * 2);
    CHECK(static_cast<const uint8_t*>(l.up.data) ==
          static_cast<const uint8_t*>(l.gate.data) + 96 * 64 * 2);
    RawTensor& gate_up = p3_tensors["model.layers.1.mlp.gate_up_proj.weight"];
    gate_up.shape = {96, 64};  // gate alone, as if up were missing
    gate_up.bytes.resize(gate_up.bytes.size() / 2);
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(p3_tensors));
    auto w = ModelWeights::Load(dir.string(), *p3);
    REQUIRE_FALSE(w.ok());
    CHECK(Message(w.status())
              .find("gate_up_proj.weight\" field shape: [96, 64] does not match "
                    "config.json ([192, 64])") != std::string::npos);
    phi["partial_rotary_factor"] = 0.75;  // Phi-4-mini
    auto partial = ParseModelConfig(phi.dump(), "config.json");
    REQUIRE_FALSE(partial.ok());
    CHECK(Message(partial.status()).find("partial_rotary_factor 0.75 is not supported") !=
          std::string::npos);
  }
  SECTION("missing tensor") {
    tensors.erase("model.norm.weight");
    testing::WriteFile(dir / "model.safetensors", EncodeSafetensors(tensors));
    auto w = ModelWeights::Load(dir.string(), *config);
    REQUIRE_FALSE(w.ok());
    CHECK(Message(w.status()).find("\"model.norm.weight\" is missing") != std::string::npos);
  }
  SECTION("index escaping the model directory") {
    testing::WriteFile(dir / "model.safetensors.index.json",
                       R"({"weight_map": {"model.norm.weight": "../etc/passwd"}})");
    auto w = ModelWeights::Load(dir.string(), *config);
    REQUIRE_FALSE(w.ok());
    CHECK(Message(w.status()).find("not a plain file name") != std::string::npos);
  }
  SECTION("shards split across two files load") {
    std::map<std::string, RawTensor> shards[2];
    const char* names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    nlohmann::json map;
    int i = 0;
    for (auto& [name, t] : tensors) {
      shards[i % 2][name] = t;
      map[name] = names[i % 2];
      ++i;
    }
    testing::WriteFile(dir / names[0], EncodeSafetensors(shards[0]));
    testing::WriteFile(dir / names[1], EncodeSafetensors(shards[1]));
    testing::WriteFile(dir / "model.safetensors.index.json",
                       nlohmann::json{{"weight_map", map}}.dump());
    auto w = ModelWeights::Load(dir.string(), *config);
    INFO(Message(w.status()));
    CHECK(w.ok());
  }
}

TEST_CASE("MapFilesResident maps every shard, in order, or names the one it cannot",
          "[engine][loader]") {
  auto dir = testing::TempDir("resident");
  std::vector<std::string> paths;
  for (int i = 0; i < 5; ++i) {
    // Sizes around page boundaries, one empty: every byte must come back where it was.
    std::string bytes(static_cast<size_t>(i == 2 ? 0 : 4096 * i + 17), '\0');
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>((k * 31 + i) & 0xff);
    paths.push_back((dir / StrCat("shard-", i)).string());
    testing::WriteFile(paths.back(), bytes);
  }
  for (int threads : {0, 1, 2, 8}) {
    auto maps = MapFilesResident(paths, threads);
    REQUIRE(maps.ok());
    REQUIRE(maps->size() == paths.size());
    for (int i = 0; i < 5; ++i) {
      const MappedFile& m = *(*maps)[i];
      REQUIRE(m.size() == static_cast<size_t>(i == 2 ? 0 : 4096 * i + 17));
      bool same = true;
      for (size_t k = 0; k < m.size(); ++k) {
        same = same && m.data()[k] == static_cast<uint8_t>((k * 31 + i) & 0xff);
      }
      CHECK(same);
    }
  }
  paths.insert(paths.begin() + 3, (dir / "missing").string());
  auto bad = MapFilesResident(paths);
  REQUIRE_FALSE(bad.ok());
  CHECK(Message(bad.status()).find("missing") != std::string::npos);
}

}  // namespace
}  // namespace exa::engine
