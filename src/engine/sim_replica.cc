#include "engine/sim_replica.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"

namespace exa::engine {

absl::StatusOr<EngineInfo> SimEngineInfo(const EngineOptions& o) {
  EngineInfo info;
  info.backend = "sim";
  info.vocab_size = o.sim.vocab_size;
  info.max_context = o.max_context > 0 ? o.max_context : o.sim.max_context;
  info.weight_bytes = o.sim.weight_bytes;
  info.eos_token_ids = {kSimEosToken};  // emitted only under an output-length directive
  info.kv_block_size = o.kv_block_size;
  const int64_t block_bytes = int64_t{o.sim.kv_bytes_per_token} * o.kv_block_size;
  info.kv_blocks_total = static_cast<int32_t>(
      std::min<int64_t>(o.kv_cache_bytes / std::max<int64_t>(1, block_bytes), int64_t{1} << 24));
  if (info.kv_blocks_total < 1) {
    return absl::InvalidArgumentError(StrCat("engine: kv_cache_bytes ", o.kv_cache_bytes,
                                             " is less than one block (", block_bytes, " bytes)"));
  }
  return info;
}

absl::StatusOr<std::unique_ptr<SimReplica>> SimReplica::Create(const EngineOptions& options,
                                                               absl::Time start) {
  EXA_ASSIGN_OR_RETURN(EngineInfo info, SimEngineInfo(options));
  auto replica = std::unique_ptr<SimReplica>(new SimReplica(start));
  replica->max_queue_ = options.max_queue;
  replica->core_ = std::make_unique<EngineCore>(
      options, std::move(info), std::make_unique<SimExecutor>(options.sim, options.kv_cache_bytes),
      nullptr, &replica->clock_);
  return replica;
}

void SimReplica::CatchUp(absl::Time now) {
  RunUntil(now);
  // An idle replica's clock jumps to the arrival; a busy one finishes its step first.
  if (clock_.Now() < now) clock_.Set(now);
}

absl::StatusOr<RequestId> SimReplica::Submit(GenerateRequest request, absl::Time now) {
  CatchUp(now);
  EXA_RETURN_IF_ERROR(core_->Validate(request));
  if (core_->waiting() >= max_queue_) {
    return absl::ResourceExhaustedError(
        StrCat("admission queue is full (", max_queue_, " requests)"));
  }
  const RequestId id = next_id_++;
  core_->Admit(std::make_unique<Sequence>(id, std::move(request), 0, now));
  return id;
}

void SimReplica::Cancel(RequestId id, absl::Time now) {
  CatchUp(now);
  core_->Cancel(id);
}

void SimReplica::RunUntil(absl::Time until) {
  const auto advance = [this](absl::Duration d) { clock_.Advance(d); };
  while (core_->HasWork() && clock_.Now() <= until) {
    auto modeled = core_->Step(advance);
    // A zero-time step (only possible when nothing could be scheduled) must not spin.
    if (!modeled.ok() || *modeled == absl::ZeroDuration()) break;
  }
}

absl::Time SimReplica::NextStepTime() const {
  return core_->HasWork() ? clock_.Now() : absl::InfiniteFuture();
}

}  // namespace exa::engine
