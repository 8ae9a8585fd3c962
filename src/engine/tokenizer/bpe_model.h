// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, merges by rank,
// unknown-token handling (unk_token, fuse_unk, byte_fallback), continuing_subword_prefix,
// end_of_word_suffix and ignore_merges, with the merge order of Hugging Face's Word::merge_all
// so that ties resolve the same way.
//
// Thread safety: Tokenize may run on many threads at once; the word cache is sharded and locked.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/tokenizer/json_fields.h"

namespace exa::engine {

// Swiss table with heterogeneous lookup (by absl::string_view, so no string copy per lookup).
using TokenIdMap = absl::flat_hash_map<std::string, int32_t>;

class BpeModel {
 public:
  // Ids must lie in [0, kMaxTokenId]: the id -> token table is sized by the largest id, so the
  // bound keeps a hostile file from asking for gigabytes. (Real vocabularies are < 300k.)
  static constexpr int64_t kMaxTokenId = (1 << 24) - 1;

  static absl::StatusOr<std::unique_ptr<BpeModel>> Parse(const json_fields::Json& node,
                                                         const std::string& path);

  // Appends the ids of one pre-tokenized word. `word` is valid UTF-8.
  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Null when no token has this id.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t byte_length;
  };
  // Words shorter than this are cached (Hugging Face caches below 256 bytes too).
  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kCacheShards = 16;
  // Per shard; 16 x 4096 words of a few ids each is a few MB at most.
  static constexpr size_t kCacheEntriesPerShard = 4096;
  struct CacheShard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words ABSL_GUARDED_BY(mu);
  };

  BpeModel() = default;
  absl::Status ParseVocab(const json_fields::Json& vocab, const std::string& path);
  absl::Status ParseMerges(const json_fields::Json& merges, const std::string& path);
  absl::Status AddMerge(const std::string& left, const std::string& right, uint32_t rank,
                        const std::string& path);
  std::vector<Symbol> InitialSymbols(std::string_view word) const;
  void MergeAll(std::vector<Symbol>* symbols) const;
  void TokenizeUncached(std::string_view word, std::vector<int32_t>* ids) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  TokenIdMap vocab_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::optional<std::string> unk_token_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_token_ids_{};  // <0xXX> ids for byte_fallback, -1 if absent.
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace exa::engine
