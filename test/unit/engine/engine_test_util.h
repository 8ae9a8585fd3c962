// Collects stream events of many requests and waits, with a deadline, until they finish.
#pragma once

#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/strings.h"
#include "engine/detokenizer.h"
#include "engine/engine.h"

namespace exa::engine::testing {

class Collector {
 public:
  struct Result {
    std::vector<int32_t> tokens;
    std::string text;
    bool finished = false;
    FinishReason reason = FinishReason::kNone;
    absl::Status status;
    std::vector<float> logprobs;
  };

  StreamCallback Callback(int key) {
    return [this, key](const StreamEvent& e) {
      absl::MutexLock lock(&mu_);
      Result& r = results_[key];
      if (e.token >= 0) {
        r.tokens.push_back(e.token);
        r.logprobs.push_back(e.logprob);
      }
      r.text += e.text;
      if (e.finished) {
        r.finished = true;
        r.reason = e.finish_reason;
        r.status = e.status;
        ++finished_;
      }
    };
  }

  // Waits until `count` requests have finished; false on timeout.
  bool WaitFinished(int count, absl::Duration timeout = absl::Seconds(60)) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return finished_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  // Waits until request `key` has streamed at least `tokens` tokens.
  bool WaitTokens(int key, size_t tokens, absl::Duration timeout = absl::Seconds(60)) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return results_[key].tokens.size() >= tokens || results_[key].finished;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  Result Get(int key) {
    absl::MutexLock lock(&mu_);
    return results_[key];
  }

 private:
  absl::Mutex mu_;
  std::map<int, Result> results_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
};

// The sim backend, fast: 0.5 ms a decode step, a 1000-token vocabulary, room for everything.
inline EngineOptions SimOptions() {
  EngineOptions o;
  o.backend = "sim";
  o.sim.decode_base_ms = 0.5;
  o.sim.prefill_per_token_us = 1;
  o.sim.vocab_size = 1000;
  o.kv_cache_bytes = int64_t{1} << 30;
  return o;
}

// A detokenizer for the sim: token t decodes to "<t>".
class AngleDetokenizer final : public Detokenizer {
  class Stream final : public TextStream {
   public:
    std::string Push(int32_t token) override { return StrCat("<", token, ">"); }
  };

 public:
  std::unique_ptr<TextStream> NewStream(bool /*keep_special_tokens*/) const override {
    return std::make_unique<Stream>();
  }
};

// Polls `cond` until true or the deadline passes.
template <typename Cond>
bool Eventually(Cond cond, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return cond();
}

}  // namespace exa::engine::testing
