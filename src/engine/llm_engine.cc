#include "engine/llm_engine.h"

#include <algorithm>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::engine {
namespace {

// How long an idle engine thread waits for work before re-checking cancels and stop.
constexpr absl::Duration kIdleWait = absl::Milliseconds(20);

int64_t EstimatedPending(const Sequence& seq, int32_t max_context) {
  const int64_t decode_left = std::max(0, seq.request.max_tokens - seq.generated());
  const int64_t context_left = std::max<int64_t>(0, max_context - static_cast<int64_t>(seq.tokens.size()));
  return seq.uncomputed() + std::min(decode_left, context_left);
}

}  // namespace

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

LlmEngine::LlmEngine(const EngineOptions& options, EngineInfo info,
                     std::unique_ptr<StepExecutor> executor,
                     std::shared_ptr<const Detokenizer> detokenizer)
    : options_(options),
      info_(std::move(info)),
      executor_(std::move(executor)),
      detokenizer_(std::move(detokenizer)),
      queue_(static_cast<size_t>(std::max(1, options.max_queue))),
      cache_(info_.kv_blocks_total, info_.kv_block_size),
      scheduler_({options.max_batch_tokens, options.max_running}, &cache_),
      logits_(static_cast<size_t>(options.max_running) * executor_->vocab_size()) {
  PublishLoad();
  thread_ = std::thread([this] { Loop(); });
}

LlmEngine::~LlmEngine() { Stop(); }

absl::Status LlmEngine::ValidateRequest(const GenerateRequest& r) const {
  if (r.prompt_tokens.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (r.max_tokens < 1) {
    return absl::InvalidArgumentError(StrCat("max_tokens ", r.max_tokens, " must be at least 1"));
  }
  const int64_t prompt = static_cast<int64_t>(r.prompt_tokens.size());
  if (prompt + r.max_tokens > info_.max_context) {
    return absl::InvalidArgumentError(StrCat("prompt of ", prompt, " tokens plus max_tokens ",
                                             r.max_tokens, " exceeds the context length of ",
                                             info_.max_context, " tokens"));
  }
  const int64_t capacity = int64_t{info_.kv_blocks_total} * info_.kv_block_size;
  if (prompt + r.max_tokens > capacity) {
    return absl::ResourceExhaustedError(StrCat("prompt of ", prompt, " tokens plus max_tokens ",
                                               r.max_tokens, " exceeds the KV cache of ", capacity,
                                               " tokens"));
  }
  for (int32_t id : r.prompt_tokens) {
    if (id < 0 || id >= info_.vocab_size) {
      return absl::InvalidArgumentError(StrCat("prompt token ", id, " is outside the vocabulary of ",
                                               info_.vocab_size));
    }
  }
  if (!r.stop_strings.empty() && detokenizer_ == nullptr) {
    return absl::InvalidArgumentError("stop strings need a tokenizer; this engine has none");
  }
  if (!r.callback) return absl::InvalidArgumentError("request has no callback");
  return ValidateSamplingParams(r.sampling);
}

absl::StatusOr<RequestId> LlmEngine::Submit(GenerateRequest request) {
  if (stopping_.load()) return absl::UnavailableError("engine is stopped");
  absl::Status valid = ValidateRequest(request);
  if (!valid.ok()) return valid;
  const RequestId id = next_id_.fetch_add(1);
  auto seq = std::make_unique<Sequence>(id, std::move(request), 0,
                                        SystemClock::Get().MonotonicNow());
  const int64_t estimate = EstimatedPending(*seq, info_.max_context);
  queued_tokens_.fetch_add(estimate);
  switch (queue_.TryPush(std::move(seq))) {
    case PushResult::kOk:
      return id;
    case PushResult::kFull:
      queued_tokens_.fetch_sub(estimate);
      return absl::ResourceExhaustedError(StrCat("admission queue is full (", queue_.capacity(),
                                                 " requests)"));
    case PushResult::kClosed:
      break;
  }
  queued_tokens_.fetch_sub(estimate);
  return absl::UnavailableError("engine is stopped");
}

void LlmEngine::Cancel(RequestId id) {
  absl::MutexLock lock(&cancel_mu_);
  cancelled_.insert(id);
}

EngineLoad LlmEngine::Load() const {
  absl::MutexLock lock(&load_mu_);
  EngineLoad load = load_;
  load.pending_tokens += queued_tokens_.load();
  load.waiting += static_cast<int32_t>(queue_.size());
  return load;
}

void LlmEngine::Stop() {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  queue_.Close();
  if (thread_.joinable()) thread_.join();
}

void LlmEngine::Admit(std::unique_ptr<Sequence> seq) {
  queued_tokens_.fetch_sub(EstimatedPending(*seq, info_.max_context));
  // Requests without a seed draw one from the engine's stream: reproducible per engine seed.
  if (!seq->request.sampling.seed) {
    seq->sampler = Sampler(seq->request.sampling, options_.seed + ++seed_counter_);
  }
  if (detokenizer_ != nullptr) seq->text_stream = detokenizer_->NewStream();
  scheduler_.Enqueue(std::move(seq));
}

void LlmEngine::DrainAdmissions() {
  while (auto seq = queue_.TryPop()) Admit(std::move(*seq));
}

void LlmEngine::ApplyCancels() {
  absl::flat_hash_set<RequestId> ids;
  {
    absl::MutexLock lock(&cancel_mu_);
    ids.swap(cancelled_);
  }
  for (RequestId id : ids) Finish(id, FinishReason::kCancelled, absl::CancelledError("cancelled"));
}

void LlmEngine::Finish(RequestId id, FinishReason reason, absl::Status status) {
  std::unique_ptr<Sequence> seq = scheduler_.Remove(id);
  if (seq == nullptr) return;
  StreamEvent event;
  event.id = id;
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

FinishReason LlmEngine::Accept(Sequence& seq, const SampledToken& sampled, absl::Time now) {
  seq.tokens.push_back(sampled.token);
  if (seq.last_token_time) {
    itl_ms_.Add(absl::ToDoubleMilliseconds(now - *seq.last_token_time));
  } else {
    ttft_ms_.Add(absl::ToDoubleMilliseconds(now - seq.arrival));
  }
  seq.last_token_time = now;
  const GenerateRequest& r = seq.request;
  FinishReason reason = FinishReason::kNone;
  const bool eos = !r.ignore_eos && std::find(info_.eos_token_ids.begin(), info_.eos_token_ids.end(),
                                              sampled.token) != info_.eos_token_ids.end();
  if (eos || std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), sampled.token) !=
                 r.stop_token_ids.end()) {
    reason = FinishReason::kStop;
  } else if (seq.generated() >= r.max_tokens ||
             static_cast<int32_t>(seq.tokens.size()) >= info_.max_context) {
    reason = FinishReason::kLength;
  }
  StreamEvent event;
  event.id = seq.id;
  event.token = sampled.token;
  event.logprob = sampled.logprob;
  event.top_logprobs = sampled.top;
  event.prompt_tokens = seq.prompt_len;
  event.completion_tokens = seq.generated();
  if (seq.text_stream != nullptr && reason != FinishReason::kStop) {
    seq.text += seq.text_stream->Push(sampled.token);
    // Stop strings: cut at the earliest match; otherwise hold back what could start one.
    size_t hold = 0, cut = std::string::npos;
    for (const std::string& stop : r.stop_strings) {
      if (stop.empty()) continue;
      const size_t from = seq.text_sent >= stop.size() ? seq.text_sent - stop.size() + 1 : 0;
      const size_t at = seq.text.find(stop, from);
      if (at != std::string::npos) cut = std::min(cut, at);
      hold = std::max(hold, stop.size() - 1);
    }
    if (cut != std::string::npos) {
      seq.text.resize(std::max(cut, seq.text_sent));
      seq.text_stream.reset();  // nothing after a stop string is sent, not even held bytes
      reason = FinishReason::kStop;
    }
    const size_t end = reason != FinishReason::kNone ? seq.text.size()
                       : seq.text.size() > seq.text_sent + hold ? seq.text.size() - hold
                                                                 : seq.text_sent;
    event.text = seq.text.substr(seq.text_sent, end - seq.text_sent);
    seq.text_sent = end;
  }
  seq.request.callback(event);
  return reason;
}

absl::Status LlmEngine::RunStep(const std::vector<ScheduledChunk>& chunks) {
  EXA_RETURN_IF_ERROR(executor_->Execute(chunks, logits_.data()));
  scheduler_.MarkComputed(chunks);
  const absl::Time now = SystemClock::Get().MonotonicNow();
  const int32_t vocab = executor_->vocab_size();
  std::vector<std::pair<RequestId, FinishReason>> finished;
  int64_t row = 0;
  for (const ScheduledChunk& c : chunks) {
    if (!c.sample) continue;
    std::span<float> logits(logits_.data() + row++ * vocab, static_cast<size_t>(vocab));
    SampledToken t = c.seq->sampler.Sample(logits, c.seq->tokens);
    FinishReason reason = Accept(*c.seq, t, now);
    if (reason != FinishReason::kNone) finished.emplace_back(c.seq->id, reason);
  }
  for (auto& [id, reason] : finished) Finish(id, reason, absl::OkStatus());
  return absl::OkStatus();
}

void LlmEngine::PublishLoad() {
  EngineLoad load;
  for (const auto* queue : {&scheduler_.running(), &scheduler_.waiting()}) {
    for (const auto& seq : *queue) load.pending_tokens += EstimatedPending(*seq, info_.max_context);
  }
  load.running = static_cast<int32_t>(scheduler_.running().size());
  load.waiting = static_cast<int32_t>(scheduler_.waiting().size());
  load.kv_blocks_used = cache_.used_blocks();
  load.kv_blocks_total = cache_.total_blocks();
  load.ttft_p50_ms = ttft_ms_.Quantile(0.5);
  load.ttft_p99_ms = ttft_ms_.Quantile(0.99);
  load.itl_p50_ms = itl_ms_.Quantile(0.5);
  load.itl_p99_ms = itl_ms_.Quantile(0.99);
  load.preemptions = scheduler_.preemptions();
  load.steps = steps_;
  absl::MutexLock lock(&load_mu_);
  load_ = load;
}

void LlmEngine::Loop() {
  while (true) {
    DrainAdmissions();
    ApplyCancels();
    if (stopping_.load()) break;
    std::vector<ScheduledChunk> chunks = scheduler_.Schedule();
    if (chunks.empty()) {
      PublishLoad();
      if (auto seq = queue_.PopWithTimeout(kIdleWait)) Admit(std::move(*seq));
      continue;
    }
    absl::Status status = RunStep(chunks);
    ++steps_;
    if (!status.ok()) {
      EXA_LOG_ERROR("engine", "step failed", {{"error", std::string(ToStd(status.message()))}});
      for (const ScheduledChunk& c : chunks) Finish(c.seq->id, FinishReason::kError, status);
    }
    PublishLoad();
  }
  // Stopping: everything still admitted or queued ends as cancelled.
  DrainAdmissions();
  std::vector<RequestId> ids;
  for (const auto* queue : {&scheduler_.running(), &scheduler_.waiting()}) {
    for (const auto& seq : *queue) ids.push_back(seq->id);
  }
  for (RequestId id : ids) Finish(id, FinishReason::kCancelled, absl::CancelledError("engine stopped"));
  PublishLoad();
}

}  // namespace exa::engine
