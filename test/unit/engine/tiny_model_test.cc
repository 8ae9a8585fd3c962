// Proves the bundled model answers the health probe (docs/architecture.md#health-checks: "1+1" must
// give "2") through the real path: tokenizer.json encode, CPU engine, greedy decode, streaming
// detokenizer; and that with its weights in bf16 it answers held-out sums as well with bf16
// activations (EngineOptions::cpu_bf16_activations) as without.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine/structured/json_schema.h"
#include "engine/tokenizer_detokenizer.h"
#include "engine_test_util.h"
#include "nlohmann/json.hpp"
#include "test_models.h"

namespace exa::engine {
namespace {

const std::string kModel = EXA_SOURCE_DIR "/models/exa-tiny-arith";

EngineOptions TinyOptions() {
  EngineOptions o;
  o.model_dir = kModel;
  o.threads = 2;
  o.kv_cache_bytes = 8 << 20;
  return o;
}

TEST_CASE("the bundled model answers 1+1= with 2", "[engine][tiny]") {
  auto detok = LoadDetokenizer(kModel);
  REQUIRE(detok.ok());
  testing::Collector c;  // outlives the engine, whose thread calls it
  auto engine = CreateEngine(TinyOptions(), *detok);
  REQUIRE(engine.ok());
  const Tokenizer& tok = (*detok)->tokenizer();
  const std::vector<int32_t> prompt = tok.Encode("1+1=", /*add_special_tokens=*/true);
  REQUIRE(prompt.size() == 5);  // <s> 1 + 1 =: digits are one token each
  CHECK(prompt[0] == (*engine)->info().bos_token_id);

  const char* prompts[] = {"1+1=", "12+34=", "50+50="};
  const char* answers[] = {"2", "46", "100"};
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r;
    r.prompt_tokens = tok.Encode(prompts[i], true);
    r.max_tokens = 8;
    r.callback = c.Callback(i);
    REQUIRE((*engine)->Submit(std::move(r)).ok());
  }
  REQUIRE(c.WaitFinished(3));
  for (int i = 0; i < 3; ++i) {
    INFO(prompts[i]);
    CHECK(c.Get(i).text == answers[i]);
    CHECK(c.Get(i).reason == FinishReason::kStop);  // ended by </s>, not by max_tokens
  }
}

TEST_CASE("min_tokens holds back the end of sequence and stop strings", "[engine][tiny]") {
  auto detok = LoadDetokenizer(kModel);
  REQUIRE(detok.ok());
  testing::Collector c;
  auto engine = CreateEngine(TinyOptions(), *detok);
  REQUIRE(engine.ok());
  const Tokenizer& tok = (*detok)->tokenizer();
  const auto submit = [&](int key, int32_t min_tokens, std::vector<std::string> stop,
                          float temperature) {
    GenerateRequest r;
    r.prompt_tokens = tok.Encode("1+1=", true);
    r.max_tokens = 8;
    r.min_tokens = min_tokens;
    r.stop_strings = std::move(stop);
    r.sampling.temperature = temperature;
    r.sampling.seed = 3;
    r.callback = c.Callback(key);
    return (*engine)->Submit(std::move(r));
  };
  REQUIRE(submit(0, 0, {}, 0).ok());
  REQUIRE(submit(1, 5, {}, 0).ok());
  REQUIRE(submit(2, 3, {"2"}, 0).ok());  // its "2" comes first: before min_tokens, not a stop
  REQUIRE(submit(3, 5, {}, 1.0f).ok());  // sampled on the host the same way
  REQUIRE(c.WaitFinished(4));
  CHECK(c.Get(0).text == "2");
  CHECK(c.Get(0).tokens.size() == 2);  // "2" and </s>
  for (int key : {1, 3}) {
    INFO("request " << key);
    CHECK(c.Get(key).tokens.size() >= 5);
    const auto& eos = (*engine)->info().eos_token_ids;
    for (size_t i = 0; i < 5; ++i) {
      CHECK(std::find(eos.begin(), eos.end(), c.Get(key).tokens[i]) == eos.end());
    }
  }
  CHECK(c.Get(1).text.rfind("2", 0) == 0);  // the same first token: only the end was held
  CHECK(c.Get(2).text.rfind("2", 0) == 0);
  CHECK(c.Get(2).tokens.size() >= 3);
  // More than max_tokens: refused by name.
  auto refused = submit(4, 9, {}, 0);
  REQUIRE_FALSE(refused.ok());
  CHECK(std::string(refused.status().message()) == "min_tokens 9 is outside [0, max_tokens 8]");
}

TEST_CASE("a text stream keeps special tokens only when asked", "[engine][tiny]") {
  auto detok = LoadDetokenizer(kModel);
  REQUIRE(detok.ok());
  const std::vector<int32_t> ids = (*detok)->tokenizer().Encode("<s>1+1=</s>", false);
  REQUIRE(ids.size() == 6);  // <s> and </s> are special tokens of their own
  auto text = [&](bool keep) {
    std::unique_ptr<TextStream> stream = (*detok)->NewStream(keep);
    std::string out;
    for (int32_t id : ids) out += stream->Push(id);
    return out + stream->Flush();
  };
  CHECK(text(false) == "1+1=");
  CHECK(text(true) == "<s>1+1=</s>");
}

// The bundled model with every weight rounded to bf16, beside its tokenizer, in a test directory.
std::string Bf16Copy() {
  const std::filesystem::path dir = testing::TempDir("tiny-bf16");
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "heldout-2digit.txt"}) {
    std::filesystem::copy_file(kModel + "/" + f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  auto file = SafetensorsFile::Open(kModel + "/model.safetensors");
  REQUIRE(file.ok());
  std::map<std::string, testing::RawTensor> tensors;
  for (const auto& [name, t] : (*file)->tensors()) {
    REQUIRE(t.dtype == DType::kF32);
    testing::RawTensor& out = tensors[name];
    out.dtype = "BF16";
    out.shape = t.shape;
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      const uint16_t h = F32ToBf16(static_cast<const float*>(t.data)[i]);
      out.bytes.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  testing::WriteFile(dir / "model.safetensors", testing::EncodeSafetensors(tensors));
  return dir.string();
}

TEST_CASE("the bundled model in bf16 answers held-out sums with bf16 activations as without",
          "[engine][tiny]") {
  const std::string dir = Bf16Copy();
  auto detok = LoadDetokenizer(dir);
  REQUIRE(detok.ok());
  const Tokenizer& tok = (*detok)->tokenizer();
  std::vector<std::pair<std::string, std::string>> cases;  // "a+b=", "c"
  std::ifstream in(dir + "/heldout-2digit.txt");
  for (std::string line; std::getline(in, line) && cases.size() < 200;) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) cases.emplace_back(line.substr(0, eq + 1), line.substr(eq + 1));
  }
  REQUIRE(cases.size() == 200);
  for (bool bf16_activations : {false, true}) {
    INFO("bf16 activations " << bf16_activations);
    EngineOptions o;
    o.model_dir = dir;
    o.threads = 2;
    o.kv_cache_bytes = 8 << 20;
    o.cpu_bf16_activations = bf16_activations;
    testing::Collector c;  // outlives the engine, whose thread calls it
    auto engine = CreateEngine(o, *detok);
    REQUIRE(engine.ok());
    for (size_t i = 0; i < cases.size(); ++i) {
      GenerateRequest r;
      r.prompt_tokens = tok.Encode(cases[i].first, true);
      r.max_tokens = 6;
      r.callback = c.Callback(static_cast<int>(i));
      REQUIRE((*engine)->Submit(std::move(r)).ok());
    }
    REQUIRE(c.WaitFinished(static_cast<int>(cases.size())));
    int exact = 0;
    for (size_t i = 0; i < cases.size(); ++i)
      exact += c.Get(static_cast<int>(i)).text == cases[i].second;
    // Measured 2026-12-04: 200 of 200 both ways (and 1000 of 1000 with exaserve-bench --accuracy).
    CHECK(exact >= 198);
  }
}

// Structured outputs (docs/architecture.md#structured-outputs) through the real path: the mask
// over the bundled model's byte-level vocabulary holds greedy decoding to the schema, a value
// that cannot grow ends the sequence at once, and a number ends at the model's </s>.
TEST_CASE("the bundled model's output follows a JSON Schema", "[engine][tiny]") {
  auto detok = LoadDetokenizer(kModel);
  REQUIRE(detok.ok());
  testing::Collector c;  // outlives the engine, whose thread calls it
  auto engine = CreateEngine(TinyOptions(), *detok);
  REQUIRE(engine.ok());
  const Tokenizer& tok = (*detok)->tokenizer();
  const char* schemas[] = {
      R"({"type":"integer"})",
      R"({"enum":["yes","no"]})",
      R"({"type":"object","properties":{"sum":{"type":"integer"},"ok":{"type":"boolean"}},
          "required":["sum","ok"]})",
      R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
      R"({"type":"integer","minimum":100,"maximum":999})",  // the model's 42 does not fit
  };
  for (int i = 0; i < 5; ++i) {
    GenerateRequest r;
    r.prompt_tokens = tok.Encode("12+30=", true);
    r.max_tokens = 240;  // room for the whitespace this model, which never saw JSON, writes
    r.grammar = *structured::CompileJsonSchema(schemas[i]);
    r.callback = c.Callback(i);
    REQUIRE((*engine)->Submit(std::move(r)).ok());
  }
  REQUIRE(c.WaitFinished(5));
  CHECK(c.Get(0).text == "42");  // the model's own answer fits the schema
  CHECK(c.Get(0).reason == FinishReason::kStop);
  const auto yes_no = nlohmann::json::parse(c.Get(1).text, nullptr, false);
  INFO(c.Get(1).text);
  CHECK((yes_no == "yes" || yes_no == "no"));
  CHECK(c.Get(1).reason == FinishReason::kStop);
  for (int i = 2; i < 4; ++i) {
    INFO(c.Get(i).text);
    REQUIRE(c.Get(i).reason == FinishReason::kStop);
    const auto v = nlohmann::json::parse(c.Get(i).text, nullptr, false);
    REQUIRE_FALSE(v.is_discarded());
    if (i == 2) CHECK((v.at("sum").is_number_integer() && v.at("ok").is_boolean()));
    if (i == 3) CHECK((v.is_array() && v.size() >= 2 && v.size() <= 3));
  }
  // A choice among plain strings (vLLM's guided_choice): the model's own answer when it is one.
  for (int i = 5; i < 7; ++i) {
    GenerateRequest r;
    r.prompt_tokens = tok.Encode("12+30=", true);
    r.max_tokens = 8;
    r.grammar = *structured::CompileChoice(i == 5 ? std::vector<std::string>{"41", "42", "43"}
                                                  : std::vector<std::string>{"7", "99"});
    r.callback = c.Callback(i);
    REQUIRE((*engine)->Submit(std::move(r)).ok());
  }
  // Text a pattern matches (vLLM's guided_regex), and a JSON string under one.
  const std::string patterns[] = {R"(4\d)", R"([5-9]\d{2})"};
  for (int i = 7; i < 10; ++i) {
    GenerateRequest r;
    r.prompt_tokens = tok.Encode("12+30=", true);
    r.max_tokens = i == 9 ? 240 : 8;
    r.grammar =
        i < 9 ? *structured::CompileRegexGrammar(patterns[i - 7])
              : *structured::CompileJsonSchema(R"({"type":"string","pattern":"^[0-9]{2}[a-c]$"})");
    r.callback = c.Callback(i);
    REQUIRE((*engine)->Submit(std::move(r)).ok());
  }
  REQUIRE(c.WaitFinished(10));
  CHECK(c.Get(5).text == "42");
  CHECK((c.Get(6).text == "7" || c.Get(6).text == "99"));
  CHECK(c.Get(6).reason == FinishReason::kStop);
  CHECK(c.Get(7).text == "42");  // the model's own answer fits
  for (int i = 7; i < 10; ++i) {
    INFO(c.Get(i).text);
    CHECK(c.Get(i).reason == FinishReason::kStop);
    const auto value = nlohmann::json::parse(c.Get(i).text, nullptr, false);
    const std::string text =
        i < 9 ? c.Get(i).text : (value.is_string() ? value.get<std::string>() : "not a string");
    CHECK(std::regex_match(text, std::regex(i < 9 ? patterns[i - 7] : "[0-9]{2}[a-c]")));
  }
  const auto bounded = nlohmann::json::parse(c.Get(4).text, nullptr, false);
  INFO(c.Get(4).text);
  CHECK(c.Get(4).reason == FinishReason::kStop);
  CHECK((bounded.is_number_integer() && bounded >= 100 && bounded <= 999));

  // Resumed mid-output on another replica (docs/architecture.md#failover), the constraint
  // replays the earlier tokens and the output goes on as it would have: the same tokens, the
  // same end. And an earlier output that breaks the schema is refused, not continued.
  const testing::Collector::Result full = c.Get(2);
  int finished = 10;
  for (const size_t k : {size_t{1}, full.tokens.size() / 2, full.tokens.size() - 1}) {
    GenerateRequest r;
    r.prompt_tokens = tok.Encode("12+30=", true);
    r.prompt_tokens.insert(r.prompt_tokens.end(), full.tokens.begin(),
                           full.tokens.begin() + static_cast<ptrdiff_t>(k));
    r.resumed_tokens = static_cast<int32_t>(k);
    r.max_tokens = 240;
    r.grammar = *structured::CompileJsonSchema(schemas[2]);
    r.callback = c.Callback(10 + static_cast<int>(k));
    REQUIRE((*engine)->Submit(std::move(r)).ok());
    REQUIRE(c.WaitFinished(++finished));
    INFO("resumed after " << k << " tokens");
    const testing::Collector::Result& rest = c.Get(10 + static_cast<int>(k));
    std::vector<int32_t> joined(full.tokens.begin(),
                                full.tokens.begin() + static_cast<ptrdiff_t>(k));
    joined.insert(joined.end(), rest.tokens.begin(), rest.tokens.end());
    CHECK(joined == full.tokens);
    CHECK(rest.reason == FinishReason::kStop);
  }
  GenerateRequest broken;
  broken.prompt_tokens = tok.Encode("12+30=42", true);
  broken.resumed_tokens = 2;  // "42" is no object
  broken.grammar = *structured::CompileJsonSchema(schemas[2]);
  broken.callback = c.Callback(99);
  REQUIRE((*engine)->Submit(std::move(broken)).ok());
  REQUIRE(c.WaitFinished(++finished));
  CHECK(c.Get(99).reason == FinishReason::kError);
  CHECK(c.Get(99).status.message() ==
        "response_format: the resumed output does not match the schema it was made for");

  // Without a tokenizer an engine cannot follow a schema: refused when submitted.
  auto bare = CreateEngine(TinyOptions(), nullptr);
  REQUIRE(bare.ok());
  GenerateRequest r;
  r.prompt_tokens = tok.Encode("1+1=", true);
  r.grammar = *structured::CompileJsonSchema(R"({"type":"integer"})");
  r.callback = c.Callback(9);
  const auto refused = (*bare)->Submit(std::move(r));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() ==
        "response_format: structured outputs need the model's tokenizer; this engine has none");
}

}  // namespace
}  // namespace exa::engine
