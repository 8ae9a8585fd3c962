#include "engine/tokenizer/bpe_model.h"

#include <queue>

#include "common/status.h"
#include "common/strings.h"
#include "engine/tokenizer/utf8.h"
#include "fmt/format.h"

namespace exa::engine {
namespace {

namespace jf = json_fields;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A queued merge; the queue pops the lowest rank first, then the leftmost position, like the
// reversed Ord of Hugging Face's `Merge`.
struct QueuedMerge {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator>(const QueuedMerge& other) const {
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Parse(const jf::Json& node,
                                                          const std::string& path) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  const jf::Json* dropout = jf::Find(node, "dropout");
  if (dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return jf::Error(jf::Child(path, "dropout"), *dropout,
                     "BPE dropout makes encoding random; only null or 0 is supported");
  }
  EXA_ASSIGN_OR_RETURN(model->unk_token_, jf::OptionalString(node, "unk_token", path));
  EXA_ASSIGN_OR_RETURN(auto prefix, jf::OptionalString(node, "continuing_subword_prefix", path));
  EXA_ASSIGN_OR_RETURN(auto suffix, jf::OptionalString(node, "end_of_word_suffix", path));
  model->continuing_subword_prefix_ = prefix.value_or("");
  model->end_of_word_suffix_ = suffix.value_or("");
  EXA_ASSIGN_OR_RETURN(model->fuse_unk_, jf::Bool(node, "fuse_unk", path, false));
  EXA_ASSIGN_OR_RETURN(model->byte_fallback_, jf::Bool(node, "byte_fallback", path, false));
  EXA_ASSIGN_OR_RETURN(model->ignore_merges_, jf::Bool(node, "ignore_merges", path, false));

  const jf::Json* vocab = jf::Find(node, "vocab");
  if (vocab == nullptr) return jf::Missing(jf::Child(path, "vocab"));
  EXA_RETURN_IF_ERROR(model->ParseVocab(*vocab, jf::Child(path, "vocab")));
  const jf::Json* merges = jf::Find(node, "merges");
  if (merges == nullptr) return jf::Missing(jf::Child(path, "merges"));
  EXA_RETURN_IF_ERROR(model->ParseMerges(*merges, jf::Child(path, "merges")));

  if (model->unk_token_.has_value() && !model->vocab_.contains(*model->unk_token_)) {
    return jf::Error(jf::Child(path, "unk_token"), *model->unk_token_, "is not in model.vocab");
  }
  for (int b = 0; b < 256; ++b) {
    model->byte_token_ids_[b] = model->TokenToId(fmt::format("<0x{:02X}>", b)).value_or(-1);
  }
  return model;
}

absl::Status BpeModel::ParseVocab(const jf::Json& vocab, const std::string& path) {
  EXA_RETURN_IF_ERROR(jf::ExpectObject(vocab, path));
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    EXA_ASSIGN_OR_RETURN(
        const int64_t id,
        jf::IntValue(it.value(), jf::Child(path, jf::Show(std::string_view(it.key()))), 0,
                     kMaxTokenId));
    vocab_.emplace(it.key(), static_cast<int32_t>(id));
    if (static_cast<size_t>(id) >= tokens_.size()) {
      tokens_.resize(id + 1);
      has_token_.resize(id + 1, false);
    }
    // Two tokens with one id: keep the first, so decoding is deterministic.
    if (!has_token_[id]) {
      tokens_[id] = it.key();
      has_token_[id] = true;
    }
  }
  return absl::OkStatus();
}

absl::Status BpeModel::ParseMerges(const jf::Json& merges, const std::string& path) {
  EXA_RETURN_IF_ERROR(jf::ExpectArray(merges, path));
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const jf::Json& entry = merges[i];
    const std::string entry_path = jf::Child(path, i);
    if (entry.is_string()) {
      // Legacy form "left right": exactly one space, as Hugging Face requires.
      const std::string& line = entry.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return jf::Error(entry_path, entry, "expected \"left right\" with exactly one space");
      }
      EXA_RETURN_IF_ERROR(AddMerge(line.substr(0, space), line.substr(space + 1), i, entry_path));
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      EXA_RETURN_IF_ERROR(
          AddMerge(entry[0].get<std::string>(), entry[1].get<std::string>(), i, entry_path));
    } else {
      return jf::Error(entry_path, entry, "expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  return absl::OkStatus();
}

absl::Status BpeModel::AddMerge(const std::string& left, const std::string& right, uint32_t rank,
                                const std::string& path) {
  const auto left_id = TokenToId(left);
  if (!left_id) return jf::Error(path, left, "merge token is not in model.vocab");
  const auto right_id = TokenToId(right);
  if (!right_id) return jf::Error(path, right, "merge token is not in model.vocab");
  // The merged token drops the right side's continuing_subword_prefix (Hugging Face does this
  // by length, whether or not the right side carries the prefix).
  const size_t prefix_length = continuing_subword_prefix_.size();
  if (right.size() < prefix_length) {
    return jf::Error(path, right, "merge token is shorter than continuing_subword_prefix");
  }
  const std::string merged = left + right.substr(prefix_length);
  const auto merged_id = TokenToId(merged);
  if (!merged_id) return jf::Error(path, merged, "merged token is not in model.vocab");
  // A repeated pair takes its last rank, as in Hugging Face's map built from the list.
  merges_[PairKey(*left_id, *right_id)] = Merge{rank, *merged_id};
  return absl::OkStatus();
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

// Port of BPE::merge_word up to merge_all: one symbol per character, with the unknown-token and
// byte-fallback rules (including the order quirk: byte-fallback symbols go in before a pending
// unknown token is flushed).
std::vector<BpeModel::Symbol> BpeModel::InitialSymbols(std::string_view word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id, uint32_t byte_length) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, byte_length});
  };
  std::optional<std::pair<int32_t, uint32_t>> pending_unk;
  const int32_t unk_id = unk_token_ ? vocab_.find(*unk_token_)->second : -1;
  const bool plain = continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  std::string decorated;
  utf8::ForEachChar(word, [&](char32_t, size_t offset, size_t length) {
    std::string_view piece = word.substr(offset, length);
    if (!plain) {
      decorated.assign(piece);
      if (offset != 0) decorated.insert(0, continuing_subword_prefix_);
      if (offset + length == word.size()) decorated += end_of_word_suffix_;
      piece = decorated;
    }
    const auto byte_length = static_cast<uint32_t>(length);
    if (const auto id = TokenToId(piece)) {
      if (pending_unk) add(pending_unk->first, pending_unk->second);
      pending_unk.reset();
      add(*id, byte_length);
      return;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char b : piece) all_bytes = all_bytes && byte_token_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all_bytes) {
        for (char b : piece) add(byte_token_ids_[static_cast<uint8_t>(b)], 1);
        return;
      }
    }
    if (unk_id < 0) return;  // No unk_token: Hugging Face drops the character.
    if (pending_unk && fuse_unk_) {
      pending_unk->second += byte_length;
      return;
    }
    if (pending_unk) add(pending_unk->first, pending_unk->second);
    pending_unk = std::make_pair(unk_id, byte_length);
  });
  if (pending_unk) add(pending_unk->first, pending_unk->second);
  return symbols;
}

// Port of Word::merge_all (without dropout): a queue of candidate merges by (rank, position);
// stale entries are recognised because the pair at their position no longer yields new_id.
void BpeModel::MergeAll(std::vector<Symbol>* symbols_ptr) const {
  std::vector<Symbol>& symbols = *symbols_ptr;
  std::priority_queue<QueuedMerge, std::vector<QueuedMerge>, std::greater<>> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const QueuedMerge top = queue.top();
    queue.pop();
    Symbol& current = symbols[top.pos];
    if (current.byte_length == 0 || current.next == -1) continue;
    const int32_t next_pos = current.next;
    const Symbol right = symbols[next_pos];
    const Merge* m = FindMerge(current.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    current.id = top.new_id;
    current.byte_length += right.byte_length;
    current.next = right.next;
    symbols[next_pos].byte_length = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size()) {
      symbols[right.next].prev = top.pos;
    }
    if (current.prev >= 0) {
      if (const Merge* left = FindMerge(symbols[current.prev].id, current.id)) {
        queue.push({left->rank, current.prev, left->new_id});
      }
    }
    if (current.next >= 0 && static_cast<size_t>(current.next) < symbols.size()) {
      if (const Merge* after = FindMerge(current.id, symbols[current.next].id)) {
        queue.push({after->rank, top.pos, after->new_id});
      }
    }
  }
}

void BpeModel::TokenizeUncached(std::string_view word, std::vector<int32_t>* ids) const {
  std::vector<Symbol> symbols = InitialSymbols(word);
  MergeAll(&symbols);
  for (const Symbol& s : symbols) {
    if (s.byte_length != 0) ids->push_back(s.id);
  }
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = TokenToId(word)) {
      ids->push_back(*id);
      return;
    }
  }
  if (word.size() >= kMaxCachedWordBytes) {
    TokenizeUncached(word, ids);
    return;
  }
  CacheShard& shard = cache_[std::hash<std::string_view>{}(word) % kCacheShards];
  {
    absl::ReaderMutexLock lock(&shard.mu);
    auto it = shard.words.find(absl::string_view(word.data(), word.size()));
    if (it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids->size();
  TokenizeUncached(word, ids);
  absl::MutexLock lock(&shard.mu);
  // A full shard stops caching rather than evicting: like Hugging Face, the cache serves the
  // frequent words seen first and never costs more than its bound.
  if (shard.words.size() < kCacheEntriesPerShard) {
    shard.words.emplace(std::string(word), std::vector<int32_t>(ids->begin() + first, ids->end()));
  }
}

}  // namespace exa::engine
