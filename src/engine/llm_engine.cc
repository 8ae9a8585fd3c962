#include "engine/llm_engine.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/strings.h"

namespace exa::engine {
namespace {

// How long an idle engine thread waits for work before re-checking cancels and stop.
constexpr absl::Duration kIdleWait = absl::Milliseconds(20);

// A journal's epoch: distinct across engines and restarts, so a gateway that watched an earlier
// replica of the same id resynchronises instead of applying deltas to the wrong set.
uint64_t NewJournalEpoch() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device() ^ (counter.fetch_add(1) << 48) ^
         static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
}

}  // namespace

LlmEngine::LlmEngine(const EngineOptions& options, EngineInfo info,
                     std::unique_ptr<StepExecutor> executor,
                     std::shared_ptr<const Detokenizer> detokenizer)
    : core_(options, std::move(info), std::move(executor), std::move(detokenizer),
            &SystemClock::Get()),
      queue_(static_cast<size_t>(std::max(1, options.max_queue))),
      journal_(NewJournalEpoch(), options.prefix_cache.report, options.prefix_cache_namespace) {
  PublishLoad();
  thread_ = std::thread([this] { Loop(); });
}

LlmEngine::~LlmEngine() { Stop(); }

absl::StatusOr<RequestId> LlmEngine::Submit(GenerateRequest request) {
  if (stopping_.load()) return absl::UnavailableError("engine is stopped");
  absl::Status valid = core_.Validate(request);  // reads only immutable info
  if (!valid.ok()) return valid;
  const RequestId id = next_id_.fetch_add(1);
  in_flight_.fetch_add(1);
  request.callback = [this, callback = std::move(request.callback)](const StreamEvent& e) {
    if (callback) callback(e);
    if (e.finished) in_flight_.fetch_sub(1);
  };
  auto seq =
      std::make_unique<Sequence>(id, std::move(request), 0, SystemClock::Get().MonotonicNow());
  const int64_t prompt = seq->uncomputed();
  const int64_t cap = DecodeCap(*seq, core_.info().max_context);
  queued_prompt_tokens_.fetch_add(prompt);
  queued_decode_caps_.fetch_add(cap);
  // Probes get a lane of kPriorityHeadroom beyond the queue's bound
  // (docs/architecture.md#health-checks: overload must not fail health checks); everything else is
  // refused when the queue is full.
  constexpr size_t kPriorityHeadroom = 16;
  const bool priority = seq->request.priority;
  const PushResult pushed = priority ? queue_.TryPushWithHeadroom(std::move(seq), kPriorityHeadroom)
                                     : queue_.TryPush(std::move(seq));
  if (pushed == PushResult::kOk) return id;
  in_flight_.fetch_sub(1);
  queued_prompt_tokens_.fetch_sub(prompt);
  queued_decode_caps_.fetch_sub(cap);
  if (pushed == PushResult::kFull) {
    return absl::ResourceExhaustedError(
        StrCat("admission queue is full (", queue_.capacity(), " requests)"));
  }
  return absl::UnavailableError("engine is stopped");
}

void LlmEngine::Cancel(RequestId id) {
  absl::MutexLock lock(&cancel_mu_);
  cancelled_.insert(id);
}

EngineLoad LlmEngine::Load() const {
  absl::MutexLock lock(&load_mu_);
  EngineLoad load = load_;
  const auto queued = static_cast<int64_t>(queue_.size());
  int64_t decode = queued_decode_caps_.load();
  // A queued request has generated nothing: expect the history's mean length (within its cap,
  // here bounded in aggregate), or its cap until the history is ready.
  if (load.expected_output_tokens > 0) {
    decode = std::min<int64_t>(
        decode, queued * static_cast<int64_t>(std::ceil(load.expected_output_tokens)));
  }
  load.pending_tokens += queued_prompt_tokens_.load() + std::max<int64_t>(0, decode);
  load.waiting += static_cast<int32_t>(queued);
  load.in_flight = in_flight_.load();
  return load;
}

void LlmEngine::Stop() {
  if (!stopping_.exchange(true)) queue_.Close();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void LlmEngine::Admit(std::unique_ptr<Sequence> seq) {
  queued_prompt_tokens_.fetch_sub(seq->uncomputed());
  queued_decode_caps_.fetch_sub(DecodeCap(*seq, core_.info().max_context));
  core_.Admit(std::move(seq));
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
  for (RequestId id : ids) core_.Cancel(id);
}

void LlmEngine::PublishLoad() {
  core_.PublishCacheEvents(journal_);
  EngineLoad load = core_.Load();
  absl::MutexLock lock(&load_mu_);
  load_ = load;
}

void LlmEngine::Loop() {
  const auto sleep = [](absl::Duration d) {
    std::this_thread::sleep_for(absl::ToChronoMicroseconds(d));
  };
  while (true) {
    DrainAdmissions();
    ApplyCancels();
    if (stopping_.load()) break;
    if (!core_.HasWork()) {
      PublishLoad();
      if (auto seq = queue_.PopWithTimeout(kIdleWait)) Admit(std::move(*seq));
      continue;
    }
    (void)core_.Step(sleep);  // a failed step already ended its requests with the error
    PublishLoad();
  }
  // Stopping: everything still admitted or queued ends as cancelled.
  DrainAdmissions();
  core_.CancelAll(absl::CancelledError("engine stopped"));
  PublishLoad();
}

}  // namespace exa::engine
