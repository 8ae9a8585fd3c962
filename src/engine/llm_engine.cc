#include "engine/llm_engine.h"

#include <algorithm>
#include <thread>

#include "common/clock.h"
#include "common/strings.h"

namespace exa::engine {
namespace {

// How long an idle engine thread waits for work before re-checking cancels and stop.
constexpr absl::Duration kIdleWait = absl::Milliseconds(20);

}  // namespace

LlmEngine::LlmEngine(const EngineOptions& options, EngineInfo info,
                     std::unique_ptr<StepExecutor> executor,
                     std::shared_ptr<const Detokenizer> detokenizer)
    : core_(options, std::move(info), std::move(executor), std::move(detokenizer),
            &SystemClock::Get()),
      queue_(static_cast<size_t>(std::max(1, options.max_queue))) {
  PublishLoad();
  thread_ = std::thread([this] { Loop(); });
}

LlmEngine::~LlmEngine() { Stop(); }

absl::StatusOr<RequestId> LlmEngine::Submit(GenerateRequest request) {
  if (stopping_.load()) return absl::UnavailableError("engine is stopped");
  absl::Status valid = core_.Validate(request);  // reads only immutable info
  if (!valid.ok()) return valid;
  const RequestId id = next_id_.fetch_add(1);
  auto seq =
      std::make_unique<Sequence>(id, std::move(request), 0, SystemClock::Get().MonotonicNow());
  const int64_t estimate = EstimatedPendingTokens(*seq, core_.info().max_context);
  queued_tokens_.fetch_add(estimate);
  const PushResult pushed = queue_.TryPush(std::move(seq));
  if (pushed == PushResult::kOk) return id;
  queued_tokens_.fetch_sub(estimate);
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
  load.pending_tokens += queued_tokens_.load();
  load.waiting += static_cast<int32_t>(queue_.size());
  return load;
}

void LlmEngine::Stop() {
  if (!stopping_.exchange(true)) queue_.Close();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void LlmEngine::Admit(std::unique_ptr<Sequence> seq) {
  queued_tokens_.fetch_sub(EstimatedPendingTokens(*seq, core_.info().max_context));
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
