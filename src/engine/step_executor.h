// Runs one scheduled step and produces logits for the chunks that sample: the model on a
// Backend (ModelExecutor) or the cost-model simulator (SimExecutor). The engine loop and its
// load reporting are the same for both.
//
// Thread safety: used by the engine thread only.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "engine/model_weights.h"
#include "engine/scheduler.h"
#include "engine/sim_cost_model.h"

namespace exa::engine {

// The sim backend's end-of-sequence token (the sim emits it only under a directive).
inline constexpr int32_t kSimEosToken = 1;
// SimOutputLengthDirective: {2, 2, 16 + L / 64, 16 + L % 64}, at the start of the prompt or at its
// end (where it leaves a shared prefix intact). Token 2 twice is never produced by encoding text;
// the digits need a vocabulary of at least 80 and L < 64 * (vocab - 16).
inline constexpr int32_t kSimDirectiveMarker = 2;
inline constexpr int32_t kSimDirectiveTokens = 4;
std::vector<int32_t> SimOutputLengthDirective(int32_t output_tokens);

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual int32_t vocab_size() const = 0;
  // Writes one row of vocab_size() logits per sampling chunk, in chunk order. Returns the
  // modeled duration of the step (sim), or zero when the work was really done.
  virtual absl::StatusOr<absl::Duration> Execute(std::span<const ScheduledChunk> chunks,
                                                 float* logits) = 0;
  // Seconds spent blocked on an accelerator since start (0 for backends that compute inline).
  virtual double device_wait_seconds() const { return 0; }
  // Bytes the replica holds of its own (KV cache, buffers; shared weights apart): its memory
  // figure for leak detection (docs/architecture.md#leak-detection) and rollouts. Read on the
  // thread that steps.
  virtual int64_t held_bytes() const { return 0; }
  // Whether ExecuteSampled works: tokens are chosen where the logits are (a GPU), and only the
  // ids cross to the host.
  virtual bool samples_on_device() const { return false; }
  // Backend::HostParallelFor: per-sequence host work spread over the backend's host threads.
  virtual void HostParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    fn(0, n);
  }
  // As Execute, but writes each sampling chunk's token (chosen with sampling[i], in chunk order)
  // to `tokens` instead of its logits.
  virtual absl::StatusOr<absl::Duration> ExecuteSampled(
      std::span<const ScheduledChunk> /*chunks*/, std::span<const DeviceSampling> /*sampling*/,
      int32_t* /*tokens*/) {
    return absl::UnimplementedError("this executor does not sample on the device");
  }
};

class ModelExecutor final : public StepExecutor {
 public:
  ModelExecutor(std::unique_ptr<Backend> backend, std::unique_ptr<ModelWeights> weights,
                std::unique_ptr<Model> model, int32_t block_size)
      : backend_(std::move(backend)),
        weights_(std::move(weights)),
        model_(std::move(model)),
        block_size_(block_size) {}
  int32_t vocab_size() const override { return model_->config().vocab_size; }
  absl::StatusOr<absl::Duration> Execute(std::span<const ScheduledChunk> chunks,
                                         float* logits) override;
  double device_wait_seconds() const override { return backend_->device_wait_seconds(); }
  int64_t held_bytes() const override { return backend_->held_bytes(); }
  bool samples_on_device() const override { return backend_->can_sample_on_device(); }
  void HostParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) override {
    backend_->HostParallelFor(n, fn);
  }
  absl::StatusOr<absl::Duration> ExecuteSampled(std::span<const ScheduledChunk> chunks,
                                                std::span<const DeviceSampling> sampling,
                                                int32_t* tokens) override;

 private:
  // Flattens `chunks` into tokens_, layout_ and rows_.
  void Lay(std::span<const ScheduledChunk> chunks);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelWeights> weights_;  // the mapping the backend's weights point into
  std::unique_ptr<Model> model_;
  int32_t block_size_;
  BatchLayout layout_;  // reused across steps
  std::vector<int32_t> tokens_, rows_;
};

// Emits deterministic tokens (a function of the sequence's last token and position, never an
// end-of-sequence id) and returns the cost model's step time (the driver waits it out: a sleep
// in the threaded engine, a clock advance in SimReplica).
//
// Output-length directive (benchmarks): a prompt that starts or ends with the tokens of
// SimOutputLengthDirective(L) ends after exactly L generated tokens, the last one kSimEosToken
// (unless max_tokens or the context ends it first). This is how a workload's true output length
// reaches the sim engine and nothing else: gateways and routers see only prompt tokens.
class SimExecutor final : public StepExecutor {
 public:
  // `reserved_bytes`: what the replica was given for its KV cache (modeled, not allocated), the
  // base of held_bytes().
  explicit SimExecutor(const SimCostModel& cost, int64_t reserved_bytes = 0)
      : cost_(cost), reserved_bytes_(reserved_bytes) {}
  int32_t vocab_size() const override { return cost_.vocab_size; }
  // The reservation plus what the leak drill (SimCostModel::leak_bytes_per_step) holds.
  int64_t held_bytes() const override { return reserved_bytes_ + leaked_bytes_; }
  absl::StatusOr<absl::Duration> Execute(std::span<const ScheduledChunk> chunks,
                                         float* logits) override;
  // The modeled device chooses the tokens: a one-hot row of vocab_size() logits per sequence,
  // filled and then sampled on the host, cost more CPU than the rest of a step (12 replicas x 64
  // sequences x 32000 logits starved the live routing bench's 2 cores). Sampling cannot change
  // a one-hot choice, so the ids are written directly.
  bool samples_on_device() const override { return true; }
  absl::StatusOr<absl::Duration> ExecuteSampled(std::span<const ScheduledChunk> chunks,
                                                std::span<const DeviceSampling> sampling,
                                                int32_t* tokens) override;

  static int32_t NextToken(int32_t last, int32_t position, int32_t vocab);
  // The directive's output length, or 0 when `prompt` carries none.
  static int32_t DirectedOutputLength(std::span<const int32_t> prompt);

 private:
  // The step's modeled duration; `emit` gets each sampling chunk's token, in chunk order.
  absl::StatusOr<absl::Duration> Run(std::span<const ScheduledChunk> chunks,
                                     const std::function<void(int32_t)>& emit);

  void Leak();  // the leak drill's step

  SimCostModel cost_;
  int64_t reserved_bytes_;
  int64_t steps_ = 0;  // for fail_every_steps
  // The leak drill's memory: real, touched allocations of kSimLeakBlockBytes, never freed until
  // the replica stops, at most kMaxSimLeakBytes.
  std::vector<std::unique_ptr<char[]>> leaked_;
  int64_t leaked_bytes_ = 0;
  int64_t leak_owed_ = 0;  // requested by steps, not yet allocated
};

}  // namespace exa::engine
