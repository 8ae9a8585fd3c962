#include "engine/scheduler.h"

#include <algorithm>

namespace exa::engine {

bool Scheduler::PreemptNewest() {
  if (running_.empty()) return false;
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  cache_->Free(&victim->blocks);
  victim->computed = 0;
  victim->published_blocks = 0;  // recompute prompt + generated tokens when it runs again
  ++victim->preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(victim));
  return true;
}

void Scheduler::ScheduleRunning(std::vector<ScheduledChunk>& out, int32_t& budget) {
  // Decodes before prefill chunks, each group in admission order.
  for (bool decode_pass : {true, false}) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Sequence* seq = running_[i].get();
      if (seq->prefilling() == decode_pass) continue;
      const int32_t count = std::min(seq->uncomputed(), budget);
      // Out of blocks: preempt from the back until this sequence fits (it may be the victim).
      while (!cache_->Grow(&seq->blocks, seq->computed + count)) {
        const bool self = running_.back().get() == seq;
        PreemptNewest();
        if (self) return;
      }
      out.push_back({seq, seq->computed, count,
                     seq->computed + count == static_cast<int32_t>(seq->tokens.size())});
      budget -= count;
    }
  }
}

void Scheduler::AdmitWaiting(std::vector<ScheduledChunk>& out, int32_t& budget) {
  while (!waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(options_.max_running)) {
    Sequence* seq = waiting_.front().get();
    if (seq->blocks.empty()) TakeCachedPrefix(*seq);
    const int32_t count = std::min(seq->uncomputed(), budget);
    if (!cache_->Grow(&seq->blocks, seq->computed + count)) {
      // Wait for free blocks; hand back the cached ones meanwhile (they stay cached).
      cache_->Free(&seq->blocks);
      seq->computed = 0;
      seq->published_blocks = 0;
      return;
    }
    prefix_hit_tokens_ += seq->computed;
    prefix_miss_tokens_ += seq->uncomputed();
    out.push_back({seq, seq->computed, count,
                   seq->computed + count == static_cast<int32_t>(seq->tokens.size())});
    budget -= count;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

std::vector<ScheduledChunk> Scheduler::Schedule() {
  std::vector<ScheduledChunk> out;
  int32_t budget = options_.max_batch_tokens;
  ScheduleRunning(out, budget);
  // A preemption inside ScheduleRunning may have moved an already scheduled sequence back to
  // waiting; drop its chunk.
  std::erase_if(out, [this](const ScheduledChunk& c) {
    return std::none_of(running_.begin(), running_.end(),
                        [&](const auto& s) { return s.get() == c.seq; });
  });
  AdmitWaiting(out, budget);
  return out;
}

void Scheduler::MarkComputed(std::span<const ScheduledChunk> chunks) {
  for (const ScheduledChunk& c : chunks) {
    c.seq->computed = c.start + c.count;
    PublishFilled(*c.seq);
  }
}

void Scheduler::HashBlocks(Sequence& seq, int32_t full_blocks) {
  if (static_cast<int32_t>(seq.block_hashes.size()) >= full_blocks) return;
  if (!seq.hash_root) seq.hash_root = hasher_.Root(cache_namespace_, seq.request.cache_salt);
  hasher_.Extend(*seq.hash_root, seq.tokens, cache_->block_size(), full_blocks, &seq.block_hashes);
}

void Scheduler::TakeCachedPrefix(Sequence& seq) {
  if (!cache_->prefix_caching() || seq.tokens.empty()) return;
  // At most all but the last token: its logits are what the first step must produce.
  const int32_t max_blocks = (static_cast<int32_t>(seq.tokens.size()) - 1) / cache_->block_size();
  if (max_blocks == 0) return;
  HashBlocks(seq, max_blocks);
  const int32_t taken =
      cache_->AcquirePrefix(seq.block_hashes, max_blocks, seq.tokens, &seq.blocks);
  seq.computed = taken * cache_->block_size();
  seq.published_blocks = taken;
}

void Scheduler::PublishFilled(Sequence& seq) {
  if (!cache_->prefix_caching()) return;
  const int32_t full = seq.computed / cache_->block_size();
  if (full <= seq.published_blocks) return;
  HashBlocks(seq, full);
  cache_->Publish(seq.blocks, std::span<const BlockHash>(seq.block_hashes).first(full),
                  seq.published_blocks, seq.tokens);
  seq.published_blocks = full;
}

std::unique_ptr<Sequence> Scheduler::Remove(RequestId id) {
  for (auto* queue : {&running_, &waiting_}) {
    for (auto it = queue->begin(); it != queue->end(); ++it) {
      if ((*it)->id != id) continue;
      std::unique_ptr<Sequence> seq = std::move(*it);
      queue->erase(it);
      cache_->Free(&seq->blocks);
      return seq;
    }
  }
  return nullptr;
}

}  // namespace exa::engine
