#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::engine {

int64_t DecodeCap(const Sequence& seq, int32_t max_context) {
  const int64_t decode_left = std::max(0, seq.request.max_tokens - seq.generated());
  const int64_t context_left =
      std::max<int64_t>(0, max_context - static_cast<int64_t>(seq.tokens.size()));
  return std::min(decode_left, context_left);
}

int64_t EstimatedPendingTokens(const Sequence& seq, int32_t max_context,
                               const OutputLengthHistory& history) {
  return seq.uncomputed() + history.ExpectedRemaining(seq.generated(), DecodeCap(seq, max_context));
}

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

EngineCore::EngineCore(const EngineOptions& options, EngineInfo info,
                       std::unique_ptr<StepExecutor> executor,
                       std::shared_ptr<const Detokenizer> detokenizer, const Clock* clock)
    : options_(options),
      info_(std::move(info)),
      executor_(std::move(executor)),
      detokenizer_(std::move(detokenizer)),
      clock_(clock),
      cache_(info_.kv_blocks_total, info_.kv_block_size, options.prefix_cache),
      scheduler_({options.max_batch_tokens, options.max_running}, &cache_,
                 options.prefix_cache_namespace),
      logits_(static_cast<size_t>(options.max_running) * executor_->vocab_size()),
      device_tokens_(static_cast<size_t>(options.max_running)) {
  // The vocabulary's trie for structured outputs, built here with the model rather than by the
  // first structured request on the thread that submits it (a gRPC thread: 0.1-0.2 s for a
  // 150 k-token vocabulary).
  if (detokenizer_ != nullptr) detokenizer_->token_trie();
}

absl::Status EngineCore::Validate(const GenerateRequest& r) const {
  if (r.prompt_tokens.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (r.max_tokens < 1) {
    return absl::InvalidArgumentError(StrCat("max_tokens ", r.max_tokens, " must be at least 1"));
  }
  if (r.resumed_tokens < 0 || r.resumed_tokens >= static_cast<int64_t>(r.prompt_tokens.size()) ||
      r.resumed_tokens > r.max_tokens) {
    return absl::InvalidArgumentError(
        StrCat("resumed_tokens ", r.resumed_tokens, " must be in [0, ",
               std::min<int64_t>(static_cast<int64_t>(r.prompt_tokens.size()) - 1, r.max_tokens),
               "]: fewer than the tokens sent, and at most max_tokens"));
  }
  // A resumed request's own earlier output counts against max_tokens, not the prompt.
  const int64_t prompt = static_cast<int64_t>(r.prompt_tokens.size()) - r.resumed_tokens;
  if (prompt + r.max_tokens > info_.max_context) {
    return absl::InvalidArgumentError(StrCat("prompt of ", prompt, " tokens plus max_tokens ",
                                             r.max_tokens, " exceeds the context length of ",
                                             info_.max_context, " tokens"));
  }
  const int64_t capacity = int64_t{info_.kv_blocks_total} * info_.kv_block_size;
  if (prompt + r.max_tokens > capacity) {
    // Not overload: this request can never fit here, however long it waits (a client error,
    // like the context check above, not a 429 or 500).
    return absl::InvalidArgumentError(StrCat("prompt of ", prompt, " tokens plus max_tokens ",
                                             r.max_tokens, " exceeds the KV cache of ", capacity,
                                             " tokens"));
  }
  for (int32_t id : r.prompt_tokens) {
    if (id < 0 || id >= info_.vocab_size) {
      return absl::InvalidArgumentError(
          StrCat("prompt token ", id, " is outside the vocabulary of ", info_.vocab_size));
    }
  }
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens) {
    return absl::InvalidArgumentError(
        StrCat("min_tokens ", r.min_tokens, " is outside [0, max_tokens ", r.max_tokens, "]"));
  }
  if (!r.stop_strings.empty() && detokenizer_ == nullptr) {
    return absl::InvalidArgumentError("stop strings need a tokenizer; this engine has none");
  }
  if (r.grammar != nullptr && (detokenizer_ == nullptr || detokenizer_->token_trie() == nullptr)) {
    return absl::InvalidArgumentError(
        "response_format: structured outputs need the model's tokenizer; this engine has none");
  }
  if (!r.callback) return absl::InvalidArgumentError("request has no callback");
  return ValidateSamplingParams(r.sampling);
}

void EngineCore::Admit(std::unique_ptr<Sequence> seq) {
  // Requests without a seed draw one from the engine's stream: reproducible per engine seed.
  if (!seq->request.sampling.seed) {
    seq->sampler = Sampler(seq->request.sampling, options_.seed + ++seed_counter_);
  }
  if (detokenizer_ != nullptr) {
    seq->text_stream = detokenizer_->NewStream(seq->request.keep_special_tokens);
    // A resumed request: the text stream decodes the earlier output again, so a character split
    // by the resume and a stop string spanning it come out as they would have on one replica;
    // of that text, what the caller already has is not sent twice (docs/architecture.md#failover).
    for (int32_t i = seq->prompt_len; i < static_cast<int32_t>(seq->tokens.size()); ++i) {
      seq->text += seq->text_stream->Push(seq->tokens[static_cast<size_t>(i)]);
    }
    seq->text_sent = std::min<size_t>(seq->text.size(), seq->request.resumed_text_bytes);
  }
  // A structured output resumed elsewhere: its constraint follows the earlier output again.
  bool replayed = true;
  if (seq->request.grammar != nullptr) {
    std::vector<int32_t> end_ids = seq->request.stop_token_ids;
    if (!seq->request.ignore_eos) {
      end_ids.insert(end_ids.end(), info_.eos_token_ids.begin(), info_.eos_token_ids.end());
    }
    seq->constraint = std::make_unique<structured::JsonConstraint>(
        seq->request.grammar, detokenizer_->token_trie(), std::move(end_ids));
    for (int32_t i = seq->prompt_len; i < static_cast<int32_t>(seq->tokens.size()); ++i) {
      replayed = replayed && seq->constraint->Accept(seq->tokens[static_cast<size_t>(i)]);
    }
  }
  // Probes, and resumed requests: a client is mid-stream on those, as on a preempted sequence,
  // which also goes back ahead of the waiting ones.
  const RequestId id = seq->id;
  const FinishReason ended = !replayed                         ? FinishReason::kError
                             : seq->request.resumed_tokens > 0 ? EndedBeforeResume(*seq)
                                                               : FinishReason::kNone;
  if (seq->request.priority || seq->request.resumed_tokens > 0) {
    scheduler_.EnqueueFront(std::move(seq));  // ahead of every waiting request
  } else {
    scheduler_.Enqueue(std::move(seq));
  }
  // Its first replica failed between its last token and the end of the stream: it ends here as
  // it would have ended there, rather than run past its end.
  if (ended == FinishReason::kError) {
    Finish(id, ended,
           absl::InvalidArgumentError(
               "response_format: the resumed output does not match the schema it was made for"));
  } else if (ended != FinishReason::kNone) {
    Finish(id, ended, absl::OkStatus());
  }
}

bool EngineCore::HoldsEnd(const Sequence& seq) {
  return seq.constraint == nullptr && seq.generated() < seq.request.min_tokens;
}

void EngineCore::MaskEnd(const GenerateRequest& r, std::span<float> logits) const {
  const auto mask = [&](int32_t id) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
      logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    }
  };
  if (!r.ignore_eos) {
    for (int32_t id : info_.eos_token_ids) mask(id);
  }
  for (int32_t id : r.stop_token_ids) mask(id);
}

bool EngineCore::IsStopToken(const GenerateRequest& r, int32_t token) const {
  const bool eos =
      !r.ignore_eos && std::find(info_.eos_token_ids.begin(), info_.eos_token_ids.end(), token) !=
                           info_.eos_token_ids.end();
  return eos || std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
                    r.stop_token_ids.end();
}

FinishReason EngineCore::EndedBeforeResume(const Sequence& seq) const {
  if (IsStopToken(seq.request, seq.tokens.back())) return FinishReason::kStop;
  if (seq.constraint != nullptr && seq.constraint->Terminal()) return FinishReason::kStop;
  if (seq.generated() >= seq.request.max_tokens ||
      static_cast<int32_t>(seq.tokens.size()) >= info_.max_context) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

void EngineCore::Cancel(RequestId id) {
  Finish(id, FinishReason::kCancelled, absl::CancelledError("cancelled"));
}

void EngineCore::CancelAll(const absl::Status& status) {
  std::vector<RequestId> ids;
  for (const auto* queue : {&scheduler_.running(), &scheduler_.waiting()}) {
    for (const auto& seq : *queue) ids.push_back(seq->id);
  }
  for (RequestId id : ids) Finish(id, FinishReason::kCancelled, status);
}

void EngineCore::Finish(RequestId id, FinishReason reason, absl::Status status) {
  std::unique_ptr<Sequence> seq = scheduler_.Remove(id);
  if (seq == nullptr) return;
  // Only requests that ran to their own end teach the estimate; a cancelled one's length says
  // nothing about what it would have produced.
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    output_lengths_.Add(seq->generated());
  }
  if (reason != FinishReason::kCancelled && reason != FinishReason::kNone) {
    const bool error = reason == FinishReason::kError;
    if (outcome_count_ == kOutcomes) {
      outcome_errors_ -= outcomes_[outcome_next_] ? 1 : 0;
    } else {
      ++outcome_count_;
    }
    outcomes_[outcome_next_] = error;
    outcome_errors_ += error ? 1 : 0;
    outcome_next_ = (outcome_next_ + 1) % kOutcomes;
  }
  StreamEvent event;
  event.id = id;
  event.time = clock_->MonotonicNow();
  event.finished = true;
  event.finish_reason = reason;
  event.status = std::move(status);
  if (reason != FinishReason::kCancelled) {
    if (seq->text_stream != nullptr) seq->text += seq->text_stream->Flush();
    event.text = seq->text.substr(std::min(seq->text_sent, seq->text.size()));
  }
  event.prompt_tokens = seq->prompt_len;
  event.completion_tokens = seq->generated();
  seq->request.callback(event);
}

FinishReason EngineCore::Accept(Sequence& seq, const SampledToken& sampled, absl::Time now) {
  seq.tokens.push_back(sampled.token);
  if (seq.last_token_time) {
    itl_ms_.Add(absl::ToDoubleMilliseconds(now - *seq.last_token_time));
  } else {
    ttft_ms_.Add(absl::ToDoubleMilliseconds(now - seq.arrival));
  }
  seq.last_token_time = now;
  const GenerateRequest& r = seq.request;
  FinishReason reason = FinishReason::kNone;
  const bool stop_token = IsStopToken(r, sampled.token);
  if (stop_token || (seq.constraint != nullptr && seq.constraint->Terminal())) {
    reason = FinishReason::kStop;  // a structured output ends once only whitespace could follow
  } else if (seq.generated() >= r.max_tokens ||
             static_cast<int32_t>(seq.tokens.size()) >= info_.max_context) {
    reason = FinishReason::kLength;
  }
  StreamEvent event;
  event.id = seq.id;
  event.time = now;
  event.token = sampled.token;
  event.logprob = sampled.logprob;
  event.top_logprobs = sampled.top;
  event.prompt_tokens = seq.prompt_len;
  event.completion_tokens = seq.generated();
  if (seq.text_stream != nullptr && !stop_token) {
    seq.text += seq.text_stream->Push(sampled.token);
    // Stop strings: cut at the earliest match; otherwise hold back what could start one.
    // Before min_tokens they are not matched (vLLM's rule); a match may still span the mark.
    size_t hold = 0, cut = std::string::npos;
    for (const std::string& stop : r.stop_strings) {
      if (stop.empty()) continue;
      const size_t from = seq.text_sent >= stop.size() ? seq.text_sent - stop.size() + 1 : 0;
      const size_t at =
          seq.generated() >= r.min_tokens ? seq.text.find(stop, from) : std::string::npos;
      if (at != std::string::npos) cut = std::min(cut, at);
      hold = std::max(hold, stop.size() - 1);
    }
    if (cut != std::string::npos) {
      seq.text.resize(std::max(cut, seq.text_sent));
      seq.text_stream.reset();  // nothing after a stop string is sent, not even held bytes
      reason = FinishReason::kStop;
    }
    const size_t end = reason != FinishReason::kNone            ? seq.text.size()
                       : seq.text.size() > seq.text_sent + hold ? seq.text.size() - hold
                                                                : seq.text_sent;
    event.text = seq.text.substr(seq.text_sent, end - seq.text_sent);
    seq.text_sent = end;
  }
  seq.request.callback(event);
  return reason;
}

absl::StatusOr<absl::Duration> EngineCore::Step(const std::function<void(absl::Duration)>& wait) {
  using SteadyClock = std::chrono::steady_clock;
  const auto seconds_since = [](SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  };
  auto phase = SteadyClock::now();
  std::vector<ScheduledChunk> chunks = scheduler_.Schedule();
  schedule_seconds_ += seconds_since(phase);
  if (chunks.empty()) return absl::ZeroDuration();
  const absl::Time scheduled_at = clock_->MonotonicNow();
  for (const ScheduledChunk& c : chunks) {
    if (c.seq->scheduled) continue;
    c.seq->scheduled = true;
    queue_ms_.Add(absl::ToDoubleMilliseconds(scheduled_at - c.seq->arrival));
  }
  phase = SteadyClock::now();
  // Tokens are chosen on the device when it can and every sampled sequence allows it (no
  // repetition penalty, no log-probabilities): only the ids cross to the host, not a vocabulary
  // of logits per sequence.
  const bool on_device = executor_->samples_on_device() &&
                         std::all_of(chunks.begin(), chunks.end(), [](const ScheduledChunk& c) {
                           return !c.sample || (c.seq->sampler.device_compatible() &&
                                                c.seq->constraint == nullptr && !HoldsEnd(*c.seq));
                         });
  device_sampling_.clear();
  if (on_device) {
    for (const ScheduledChunk& c : chunks) {
      if (c.sample) device_sampling_.push_back(c.seq->sampler.DeviceDraw(c.seq->generated()));
    }
  }
  absl::StatusOr<absl::Duration> modeled =
      on_device ? executor_->ExecuteSampled(chunks, device_sampling_, device_tokens_.data())
                : executor_->Execute(chunks, logits_.data());
  execute_seconds_ += seconds_since(phase);
  ++steps_;
  if (!modeled.ok()) {
    EXA_LOG_ERROR("engine", "step failed",
                  {{"error", std::string(ToStd(modeled.status().message()))}});
    for (const ScheduledChunk& c : chunks)
      Finish(c.seq->id, FinishReason::kError, modeled.status());
    return modeled.status();
  }
  if (*modeled > absl::ZeroDuration() && wait) wait(*modeled);
  phase = SteadyClock::now();
  Complete(chunks, on_device);
  complete_seconds_ += seconds_since(phase);
  return *modeled;
}

void EngineCore::Complete(const std::vector<ScheduledChunk>& chunks, bool sampled_on_device) {
  scheduler_.MarkComputed(chunks);
  const absl::Time now = clock_->MonotonicNow();
  std::vector<std::pair<RequestId, FinishReason>> finished;
  std::vector<RequestId> unwritable;  // structured outputs no token of the vocabulary continues
  const std::vector<HostSample> sampled =
      sampled_on_device ? std::vector<HostSample>() : SampleOnHost(chunks);
  int64_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& c = chunks[i];
    if (!c.sample) continue;
    SampledToken t;
    if (sampled_on_device) {
      t.token = device_tokens_[static_cast<size_t>(row++)];
    } else {
      if (!sampled[i].writable) {
        unwritable.push_back(c.seq->id);
        continue;
      }
      t = sampled[i].token;
      // Masked, so the token fits; a stop token leaves the constraint as it is.
      if (c.seq->constraint != nullptr && !IsStopToken(c.seq->request, t.token)) {
        c.seq->constraint->Accept(t.token);
      }
    }
    FinishReason reason = Accept(*c.seq, t, now);
    if (reason != FinishReason::kNone) finished.emplace_back(c.seq->id, reason);
  }
  for (auto& [id, reason] : finished) Finish(id, reason, absl::OkStatus());
  for (RequestId id : unwritable) {
    Finish(id, FinishReason::kError,
           absl::FailedPreconditionError("response_format: no token of the model's vocabulary "
                                         "continues the output as the schema requires"));
  }
}

std::vector<EngineCore::HostSample> EngineCore::SampleOnHost(
    const std::vector<ScheduledChunk>& chunks) {
  const int64_t vocab = executor_->vocab_size();
  std::vector<HostSample> out(chunks.size());
  std::vector<size_t> rows;  // the sampling chunks, in logits row order
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].sample) rows.push_back(i);
  }
  // Each row touches only its own sequence's constraint and sampler, logits row and result.
  auto sample = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const ScheduledChunk& c = chunks[rows[static_cast<size_t>(r)]];
      HostSample& s = out[rows[static_cast<size_t>(r)]];
      std::span<float> logits(logits_.data() + r * vocab, static_cast<size_t>(vocab));
      if (c.seq->constraint != nullptr && !c.seq->constraint->Mask(logits)) {
        s.writable = false;
        continue;
      }
      if (HoldsEnd(*c.seq)) MaskEnd(c.seq->request, logits);
      s.token = c.seq->sampler.Sample(logits, c.seq->tokens, c.seq->generated());
    }
  };
  if (rows.size() > 1) {
    executor_->HostParallelFor(static_cast<int64_t>(rows.size()), sample);
  } else {
    sample(0, static_cast<int64_t>(rows.size()));
  }
  return out;
}

void EngineCore::PublishCacheEvents(PrefixJournal& journal) {
  if (cache_.events_lost()) {
    const std::vector<BlockHash> all = cache_.Snapshot();
    journal.Reset(all);
    return;
  }
  const std::vector<CacheEvent> events = cache_.TakeEvents();
  journal.Append(events);
}

EngineLoad EngineCore::Load() const {
  EngineLoad load;
  for (const auto* queue : {&scheduler_.running(), &scheduler_.waiting()}) {
    for (const auto& seq : *queue)
      load.pending_tokens += EstimatedPendingTokens(*seq, info_.max_context, output_lengths_);
  }
  load.running = static_cast<int32_t>(scheduler_.running().size());
  load.max_running = options_.max_running;
  load.waiting = static_cast<int32_t>(scheduler_.waiting().size());
  load.blocked = load.waiting;  // the scheduler's own waiting line: no slot or KV this step
  load.kv_blocks_used = cache_.used_blocks();
  load.kv_blocks_total = cache_.total_blocks();
  load.kv_blocks_cached = cache_.cached_blocks();
  load.kv_evictions = cache_.evictions();
  load.prefix_hit_tokens = scheduler_.prefix_hit_tokens();
  load.prefix_miss_tokens = scheduler_.prefix_miss_tokens();
  load.memory_bytes = executor_->held_bytes();
  load.ttft_p50_ms = ttft_ms_.Quantile(0.5);
  load.ttft_p99_ms = ttft_ms_.Quantile(0.99);
  load.itl_p50_ms = itl_ms_.Quantile(0.5);
  load.itl_p99_ms = itl_ms_.Quantile(0.99);
  load.queue_p90_ms = queue_ms_.Quantile(0.9);
  load.expected_output_tokens = output_lengths_.ready() ? output_lengths_.Mean() : 0.0;
  load.recent_finished = static_cast<int32_t>(outcome_count_);
  load.error_rate = outcome_count_ == 0 ? 0.0 : double(outcome_errors_) / double(outcome_count_);
  load.preemptions = scheduler_.preemptions();
  load.steps = steps_;
  load.schedule_seconds = schedule_seconds_;
  load.execute_seconds = execute_seconds_;
  load.device_wait_seconds = executor_->device_wait_seconds();
  load.complete_seconds = complete_seconds_;
  return load;
}

}  // namespace exa::engine
