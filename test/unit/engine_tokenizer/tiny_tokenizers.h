// Small tokenizer.json documents built in code, for tests that need exact control over the
// vocabulary and merges.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/byte_level.h"
#include "nlohmann/json.hpp"

namespace exa::engine::testing {

// A GPT-2-style byte-level BPE: ids 0..255 are the byte-level characters of bytes 0..255, then
// one id per merge in order. `merges` are pairs of byte-level strings ("Ġ" is a space).
inline nlohmann::json ByteLevelTokenizer(
    const std::vector<std::pair<std::string, std::string>>& merges, bool use_regex,
    bool pairs_format = true) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[std::string(byte_level::CharForByte(static_cast<uint8_t>(b)))] = b;
  }
  nlohmann::json merge_list = nlohmann::json::array();
  int next_id = 256;
  for (const auto& [left, right] : merges) {
    if (!vocab.contains(left + right)) vocab[left + right] = next_id++;
    if (pairs_format) {
      merge_list.push_back({left, right});
    } else {
      merge_list.push_back(left + " " + right);
    }
  }
  nlohmann::json byte_level = {{"type", "ByteLevel"},
                               {"add_prefix_space", false},
                               {"trim_offsets", true},
                               {"use_regex", use_regex}};
  return {{"version", "1.0"},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

inline nlohmann::json AddedTokenJson(const std::string& content, int id, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

}  // namespace exa::engine::testing
