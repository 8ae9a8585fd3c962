// Hugging Face tokenizer.json BPE tokenizers: byte-level (GPT-2, Llama-3, Qwen2/3: NFC + regex
// Split + ByteLevel) and SentencePiece-style (Llama-2, Mistral: Prepend/Replace or Metaspace,
// byte fallback), with added and special tokens. Encode gives exactly the ids of Hugging Face
// `tokenizers` (checked against it on real files in test/unit/engine_tokenizer/), Decode exactly
// its text.
//
// What is read from tokenizer.json: "model" (BPE only), "normalizer", "pre_tokenizer",
// "post_processor", "decoder", "added_tokens". "truncation" and "padding" are ignored: the
// engine bounds prompt length itself. Anything unsupported is an INVALID_ARGUMENT error naming
// the file, the JSON path and the value, e.g.
//   tokenizer.json: model.type "WordPiece": unsupported model; supported: BPE
//
// Thread safety: a Tokenizer is immutable after loading (its word cache is internally locked);
// Encode, Decode and the lookups may run on any number of threads at once. A StreamDecoder is
// per sequence and not thread-safe; it must not outlive its Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace exa::engine {

class AddedVocabulary;
enum class InvalidUtf8;
class BpeModel;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;

class Tokenizer {
 public:
  // A tokenizer.json file larger than this is refused before reading (the largest real ones are
  // a few tens of MB).
  static constexpr size_t kMaxFileBytes = 512u << 20;

  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // `source_name` prefixes error messages (normally the file name).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text,
                                                             std::string_view source_name);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. Added/special tokens written in the text are always recognised (as
  // Hugging Face does); `add_special_tokens` applies the post-processor (e.g. a leading <s>).
  // Invalid UTF-8 in `text` is first replaced by U+FFFD, so any input encodes.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`; ids outside the vocabulary are skipped, as Hugging Face does. With
  // `skip_special_tokens`, special added tokens (e.g. <|im_end|>, <s>) are left out. Always
  // valid UTF-8: bytes that do not form characters become U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // For structured outputs: the bytes each token adds to an output it does not start, as raw
  // bytes (a token may hold part of a UTF-8 character); nullopt for special tokens and unknown
  // ids. Indexed by id, vocab_size() entries.
  std::vector<std::optional<std::string>> AllTokenBytes() const;

  // One past the largest id (model vocabulary and added tokens): the embedding table's rows.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token's string as stored in tokenizer.json (byte-level or ▁ form, not decoded text).
  std::optional<std::string> IdToToken(int32_t id) const;
  // True for added tokens marked "special" (skipped by Decode with skip_special_tokens).
  bool IsSpecial(int32_t id) const;

 private:
  Tokenizer();
  absl::Status Load(std::string_view json_text);
  absl::Status LoadAddedTokens(const nlohmann::json& root);
  void EncodeSegment(std::string text, bool at_start, std::vector<int32_t>* ids) const;
  std::string DecodeWith(std::span<const int32_t> ids, bool skip_special_tokens,
                         InvalidUtf8 invalid) const;
  // The string a token contributes to decoding, or null for an unknown id.
  const std::string* DecodeString(int32_t id) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  // Added token id -> the string decoding uses for it (its normalized form when it has one).
  absl::flat_hash_map<int32_t, std::string> added_decode_strings_;
  absl::flat_hash_map<int32_t, std::string> added_contents_;
  absl::flat_hash_map<std::string, int32_t> added_ids_;
  // Hugging Face skips special tokens by content, so a model token spelled like one is skipped.
  absl::flat_hash_set<std::string> special_contents_;
  absl::flat_hash_set<int32_t> special_ids_;
  int32_t vocab_size_ = 0;
};

}  // namespace exa::engine
