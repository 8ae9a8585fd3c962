#include "engine/step_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "common/status.h"
#include "common/strings.h"

namespace exa::engine {

void ModelExecutor::Lay(std::span<const ScheduledChunk> chunks) {
  layout_.positions.clear();
  layout_.slots.clear();
  layout_.token_seq.clear();
  layout_.block_tables.resize(chunks.size());
  tokens_.clear();
  rows_.clear();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& c = chunks[i];
    layout_.block_tables[i] = c.seq->blocks;
    for (int32_t p = c.start; p < c.start + c.count; ++p) {
      tokens_.push_back(c.seq->tokens[p]);
      layout_.positions.push_back(p);
      layout_.slots.push_back(c.seq->blocks[p / block_size_] * block_size_ + p % block_size_);
      layout_.token_seq.push_back(static_cast<int32_t>(i));
    }
    if (c.sample) rows_.push_back(static_cast<int32_t>(tokens_.size()) - 1);
  }
}

absl::StatusOr<absl::Duration> ModelExecutor::Execute(std::span<const ScheduledChunk> chunks,
                                                      float* logits) {
  Lay(chunks);
  EXA_RETURN_IF_ERROR(model_->Forward(tokens_, layout_, rows_, logits));
  return absl::ZeroDuration();
}

absl::StatusOr<absl::Duration> ModelExecutor::ExecuteSampled(
    std::span<const ScheduledChunk> chunks, std::span<const DeviceSampling> sampling,
    int32_t* tokens) {
  Lay(chunks);
  EXA_RETURN_IF_ERROR(model_->ForwardSample(tokens_, layout_, rows_, sampling, tokens));
  return absl::ZeroDuration();
}

std::vector<int32_t> SimOutputLengthDirective(int32_t output_tokens) {
  const int32_t l = std::max(1, output_tokens);
  return {kSimDirectiveMarker, kSimDirectiveMarker, 16 + l / 64, 16 + l % 64};
}

int32_t SimExecutor::DirectedOutputLength(std::span<const int32_t> prompt) {
  if (prompt.size() < kSimDirectiveTokens) return 0;
  const auto parse = [](std::span<const int32_t> d) -> int32_t {
    if (d[0] != kSimDirectiveMarker || d[1] != kSimDirectiveMarker || d[2] < 16 || d[3] < 16 ||
        d[3] >= 80) {
      return 0;
    }
    return (d[2] - 16) * 64 + (d[3] - 16);
  };
  if (int32_t l = parse(prompt.first(kSimDirectiveTokens)); l > 0) return l;
  return parse(prompt.last(kSimDirectiveTokens));
}

int32_t SimExecutor::NextToken(int32_t last, int32_t position, int32_t vocab) {
  // Small ids are usually special tokens (bos/eos/pad): stay clear of the first 16.
  uint64_t h =
      static_cast<uint64_t>(last) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(position);
  h ^= h >> 29;
  return 16 + static_cast<int32_t>(h % static_cast<uint64_t>(std::max(1, vocab - 16)));
}

void SimExecutor::Leak() {
  constexpr int64_t kSimLeakBlockBytes = int64_t{1} << 20;
  constexpr int64_t kMaxSimLeakBytes = int64_t{1} << 30;
  leak_owed_ += cost_.leak_bytes_per_step;
  while (leak_owed_ >= kSimLeakBlockBytes && leaked_bytes_ < kMaxSimLeakBytes) {
    auto block = std::make_unique<char[]>(kSimLeakBlockBytes);
    std::memset(block.get(), 0x5a, kSimLeakBlockBytes);  // resident, as a real leak is
    leaked_.push_back(std::move(block));
    leaked_bytes_ += kSimLeakBlockBytes;
    leak_owed_ -= kSimLeakBlockBytes;
  }
}

absl::StatusOr<absl::Duration> SimExecutor::Run(std::span<const ScheduledChunk> chunks,
                                                const std::function<void(int32_t)>& emit) {
  while (!cost_.stall_file.empty() && std::filesystem::exists(cost_.stall_file)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (cost_.leak_bytes_per_step > 0) Leak();
  if (cost_.fail_every_steps > 0 && ++steps_ % cost_.fail_every_steps == 0) {
    return absl::InternalError(StrCat("sim: injected failure of step ", steps_,
                                      " (fail_every_steps ", cost_.fail_every_steps, ")"));
  }
  int64_t prefill = 0, decodes = 0, context = 0;
  for (const ScheduledChunk& c : chunks) {
    (c.seq->prefilling() ? prefill : decodes) += c.seq->prefilling() ? c.count : 1;
    context += c.start + c.count;
    if (!c.sample) continue;
    const int32_t end = c.start + c.count;
    const int32_t directed = DirectedOutputLength(
        std::span<const int32_t>(c.seq->tokens.data(), static_cast<size_t>(c.seq->prompt_len)));
    // The token sampled now is the sequence's (generated + 1)-th.
    const bool last = directed > 0 && c.seq->generated() + 1 >= directed;
    emit(last ? kSimEosToken : NextToken(c.seq->tokens[end - 1], end, cost_.vocab_size));
  }
  return cost_.StepTime(prefill, decodes, context);
}

absl::StatusOr<absl::Duration> SimExecutor::Execute(std::span<const ScheduledChunk> chunks,
                                                    float* logits) {
  int64_t row = 0;
  return Run(chunks, [&](int32_t token) {
    float* out = logits + row++ * cost_.vocab_size;
    std::fill(out, out + cost_.vocab_size, 0.0f);
    out[token] = 100.0f;  // one-hot: every sampler setting picks it
  });
}

absl::StatusOr<absl::Duration> SimExecutor::ExecuteSampled(
    std::span<const ScheduledChunk> chunks, std::span<const DeviceSampling> /*sampling*/,
    int32_t* tokens) {
  int64_t row = 0;
  return Run(chunks, [&](int32_t token) { tokens[row++] = token; });
}

}  // namespace exa::engine
