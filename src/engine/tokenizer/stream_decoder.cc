#include "engine/tokenizer/stream_decoder.h"

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

bool EndsWithReplacement(const std::string& text) { return text.ends_with(utf8::kReplacementUtf8); }

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::Decode() const { return tokenizer_.Decode(ids_, skip_special_tokens_); }

void StreamDecoder::Restart() {
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
}

std::string StreamDecoder::Push(int32_t id) {
  if (prefix_.empty() && !ids_.empty()) {
    std::string first = Decode();
    if (!EndsWithReplacement(first)) {
      prefix_ = std::move(first);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  const std::string text = Decode();
  const bool complete = text.size() > prefix_.size() && !EndsWithReplacement(text);
  const bool overdue = ids_.size() - prefix_index_ > kMaxHeldIds;
  if (!complete && !overdue) return "";
  if (!text.starts_with(prefix_)) {
    // A decoder whose output for a longer window does not extend the shorter one; none of the
    // supported decoders does this, but never emit text twice: emit the new ids alone.
    const std::vector<int32_t> fresh(ids_.begin() + prefix_index_, ids_.end());
    Restart();
    return tokenizer_.Decode(fresh, skip_special_tokens_);
  }
  std::string new_text = text.substr(prefix_.size());
  if (!complete) {
    Restart();  // Overdue: give up on completing the held bytes.
    return new_text;
  }
  // Keep the ids from the old prefix on as context for the next step.
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + prefix_index_);
  prefix_ = Decode();
  prefix_index_ = new_prefix_index;
  return new_text;
}

std::string StreamDecoder::Flush() {
  const std::string text = Decode();
  std::string rest;
  if (text.size() > prefix_.size() && text.starts_with(prefix_)) rest = text.substr(prefix_.size());
  Restart();
  return rest;
}

}  // namespace exa::engine
