#include "engine/scheduler.h"

#include <algorithm>

namespace exa::engine {

bool Scheduler::PreemptNewest() {
  if (running_.empty()) return false;
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  cache_->Free(&victim->blocks);
  victim->computed = 0;  // recompute prompt + generated tokens when it runs again
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
    const int32_t count = std::min(seq->uncomputed(), budget);
    if (!cache_->Grow(&seq->blocks, seq->computed + count)) return;  // wait for free blocks
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
  for (const ScheduledChunk& c : chunks) c.seq->computed = c.start + c.count;
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
