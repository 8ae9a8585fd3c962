#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "common/check.h"
#include "common/strings.h"
#include "engine/cpu/kernels.h"

namespace exa::engine::cpu {
namespace {

int DefaultThreads(int threads) {
  if (threads > 0) return threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

const float* F32(const Weight& w) { return static_cast<const float*>(w.data); }

}  // namespace

CpuBackend::CpuBackend(int threads, DType kv_storage, absl::Duration spin)
    : pool_(DefaultThreads(threads), spin), kv_storage_(kv_storage) {}

absl::StatusOr<Weight> CpuBackend::UploadWeight(const TensorView& t) {
  Weight w;
  w.data = t.data;
  w.dtype = t.dtype;
  w.rows = t.shape.size() == 2 ? t.shape[0] : 1;
  w.cols = t.shape.empty() ? 1 : t.shape.back();
  if (t.shape.size() > 2) return absl::InvalidArgumentError("weights must be 1-D or 2-D");
  // Norm weights and biases are read element by element; widen them once to fp32.
  if (w.rows == 1 && t.dtype != DType::kF32) {
    auto copy = std::make_unique<float[]>(w.cols);
    ConvertRow(t.data, t.dtype, w.cols, copy.get());
    w.data = copy.get();
    w.dtype = DType::kF32;
    buffers_.push_back(std::move(copy));
    held_bytes_ += w.cols * static_cast<int64_t>(sizeof(float));
  }
  return w;
}

absl::StatusOr<Buffer> CpuBackend::Allocate(int64_t rows, int64_t cols) {
  auto mem = std::make_unique<float[]>(static_cast<size_t>(rows * cols));
  Buffer b{mem.get(), rows, cols};
  buffers_.push_back(std::move(mem));
  held_bytes_ += rows * cols * static_cast<int64_t>(sizeof(float));
  return b;
}

absl::Status CpuBackend::AllocateKvCache(const KvCacheShape& shape) {
  kv_shape_ = shape;
  const size_t floats = static_cast<size_t>(shape.Bytes() / sizeof(float));
  kv_.reset(new (std::nothrow) float[floats]);
  if (kv_ == nullptr) {
    return absl::ResourceExhaustedError(
        StrCat("cannot allocate a KV cache of ", shape.Bytes(), " bytes"));
  }
  held_bytes_ += shape.Bytes();
  return absl::OkStatus();
}

float* CpuBackend::KeyAt(int32_t layer, int32_t slot) const {
  const int64_t per_half = int64_t{kv_shape_.num_blocks} * kv_shape_.block_size * kv_shape_.kv_dim;
  return kv_.get() + (2 * layer) * per_half + int64_t{slot} * kv_shape_.kv_dim;
}

float* CpuBackend::ValueAt(int32_t layer, int32_t slot) const {
  const int64_t per_half = int64_t{kv_shape_.num_blocks} * kv_shape_.block_size * kv_shape_.kv_dim;
  return kv_.get() + (2 * layer + 1) * per_half + int64_t{slot} * kv_shape_.kv_dim;
}

void CpuBackend::Embedding(const Weight& table, std::span<const int32_t> ids, Buffer out) {
  const size_t row_bytes = static_cast<size_t>(table.cols) * DTypeBytes(table.dtype);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto* row = static_cast<const uint8_t*>(table.data) + ids[i] * row_bytes;
    ConvertRow(row, table.dtype, table.cols, out.data + i * out.cols);
  }
}

void CpuBackend::RmsNorm(Buffer x, const Weight& weight, float eps, Buffer out) {
  ParallelRows(x.rows, x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x.data + r * x.cols;
      float* o = out.data + r * out.cols;
      // Sum of squares in double: the mean is then exact to fp32 rounding, like PyTorch's.
      double ss = 0;
      for (int64_t i = 0; i < x.cols; ++i) ss += double{xr[i]} * xr[i];
      const float scale = 1.0f / std::sqrt(static_cast<float>(ss / x.cols) + eps);
      for (int64_t i = 0; i < x.cols; ++i) o[i] = (xr[i] * scale) * F32(weight)[i];
    }
  });
}

void CpuBackend::ParallelRows(int64_t rows, int64_t cost_per_row,
                              const std::function<void(int64_t, int64_t)>& fn, int64_t chunks) {
  constexpr int64_t kInlineCost = 1 << 15;  // elements; below this one thread is faster
  if (rows * cost_per_row < kInlineCost) return fn(0, rows);
  pool_.ParallelFor(rows, fn, chunks);
}

void CpuBackend::MatMul(Buffer x, const Weight& w, const Weight* bias, Buffer out) {
  const MatMulTarget target{&w, bias, out};
  MatMulShared(x, std::span<const MatMulTarget>(&target, 1));
}

void CpuBackend::MatMulShared(Buffer x, std::span<const MatMulTarget> targets) {
  // Work is split in groups of 16 weight rows across all targets: enough pieces to balance the
  // threads (the kernels give the same result however the rows are split).
  constexpr int64_t kGroup = 16;
  std::vector<int64_t> first_group(targets.size() + 1, 0);
  for (size_t i = 0; i < targets.size(); ++i) {
    const MatMulTarget& t = targets[i];
    EXA_CHECK(x.cols == t.w->cols && t.out.cols == t.w->rows && t.out.rows == x.rows)
        << "matmul shapes x[" << x.rows << "," << x.cols << "] w[" << t.w->rows << "," << t.w->cols
        << "] out[" << t.out.rows << "," << t.out.cols << "]";
    first_group[i + 1] = first_group[i] + (t.w->rows + kGroup - 1) / kGroup;
  }
  PrepareInputs(x, targets);
  const int64_t groups = first_group.back();
  auto run = [&](int64_t begin, int64_t end) {
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t b = std::max(begin, first_group[i]), e = std::min(end, first_group[i + 1]);
      if (b >= e) continue;
      const MatMulTarget& t = targets[i];
      MatMulRange(inputs_[static_cast<size_t>(t.w->dtype)], t.w->data,
                  (b - first_group[i]) * kGroup, std::min(t.w->rows, (e - first_group[i]) * kGroup),
                  t.out.data, t.out.cols);
    }
  };
  pool_.ParallelFor(groups, run, std::min<int64_t>(groups, pool_.size() * 4));
  for (const MatMulTarget& t : targets) {
    if (t.bias == nullptr || !t.bias->present()) continue;
    for (int64_t r = 0; r < t.out.rows; ++r) {
      for (int64_t i = 0; i < t.out.cols; ++i) t.out.data[r * t.out.cols + i] += F32(*t.bias)[i];
    }
  }
}

void CpuBackend::PrepareInputs(Buffer x, std::span<const MatMulTarget> targets) {
  // x narrowed to the weights' half type (set_matmul_input_rounding) as it is packed.
  const bool narrow = x.rows >= matmul_rounding_min_rows_;
  bool needed[3] = {false, false, false};
  for (const MatMulTarget& t : targets) needed[static_cast<size_t>(t.w->dtype)] = true;
  for (size_t d = 0; d < 3; ++d) {
    if (!needed[d]) continue;
    MatMulInput& in = inputs_[d];
    in.Reset(x.data, x.cols, x.rows, x.cols, static_cast<DType>(d),
             narrow && static_cast<DType>(d) == matmul_input_rounding_);
    if (in.needs_pack()) {
      ParallelRows(x.rows, x.cols, [&](int64_t begin, int64_t end) { in.PackRows(begin, end); });
    }
  }
}

void CpuBackend::Rope(Buffer q, Buffer k, int32_t head_dim, std::span<const float> inv_freq,
                      const BatchLayout& layout) {
  const int32_t half = head_dim / 2;
  ParallelRows(q.rows, 4 * (q.cols + k.cols), [&](int64_t begin, int64_t end) {
    std::vector<float> cos(half), sin(half);
    for (int64_t t = begin; t < end; ++t) {
      // fp32 angle as PyTorch computes it (outer product of fp32 positions and inv_freq).
      const float pos = static_cast<float>(layout.positions[t]);
      for (int32_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[i];
        cos[i] = std::cos(angle);
        sin[i] = std::sin(angle);
      }
      for (Buffer* b : {&q, &k}) {
        float* row = b->data + t * b->cols;
        for (int64_t h = 0; h < b->cols / head_dim; ++h) {
          float* v = row + h * head_dim;
          for (int32_t i = 0; i < half; ++i) {
            const float x1 = v[i], x2 = v[i + half];
            v[i] = x1 * cos[i] - x2 * sin[i];
            v[i + half] = x2 * cos[i] + x1 * sin[i];
          }
        }
      }
    }
  });
}

void CpuBackend::StoreKv(int32_t layer, Buffer k, Buffer v, const BatchLayout& layout) {
  const size_t bytes = static_cast<size_t>(kv_shape_.kv_dim) * sizeof(float);
  for (int64_t t = 0; t < k.rows; ++t) {
    std::memcpy(KeyAt(layer, layout.slots[t]), k.data + t * k.cols, bytes);
    std::memcpy(ValueAt(layer, layout.slots[t]), v.data + t * v.cols, bytes);
    if (kv_storage_ == DType::kF32) continue;
    for (float* row : {KeyAt(layer, layout.slots[t]), ValueAt(layer, layout.slots[t])}) {
      for (int32_t i = 0; i < kv_shape_.kv_dim; ++i) {
        row[i] =
            kv_storage_ == DType::kBF16 ? Bf16ToF32(F32ToBf16(row[i])) : F16ToF32(F32ToF16(row[i]));
      }
    }
  }
}

void CpuBackend::Attention(int32_t layer, Buffer q, const AttentionParams& p,
                           const BatchLayout& layout, Buffer out) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  const float scale = p.scale > 0 ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  int32_t max_len = 0;
  for (int32_t pos : layout.positions) max_len = std::max(max_len, pos + 1);
  const float* keys = KeyAt(layer, 0);
  const float* values = ValueAt(layer, 0);
  // One item per token and key/value head: the group's query heads read each cached row once.
  ParallelRows(
      q.rows * p.num_kv_heads, int64_t{max_len} * p.head_dim * 2 * group,
      [&](int64_t begin, int64_t end) {
        std::vector<float> scores(static_cast<size_t>(max_len) * group);
        std::vector<int32_t> slots;  // of token `slots_of`'s positions
        int64_t slots_of = -1;
        for (int64_t i = begin; i < end; ++i) {
          const int64_t t = i / p.num_kv_heads;
          const int32_t kv_head = static_cast<int32_t>(i % p.num_kv_heads);
          // The positions this token sees: [first, position].
          const int32_t end_pos = layout.positions[t] + 1;
          const int32_t first = p.window > 0 ? std::max(0, end_pos - p.window) : 0;
          const int32_t len = end_pos - first;
          if (slots_of != t) {
            const std::vector<int32_t>& blocks = layout.block_tables[layout.token_seq[t]];
            slots.resize(len);
            for (int32_t j = 0; j < len; ++j) {
              const int32_t at = first + j;
              slots[j] = blocks[at / p.block_size] * p.block_size + at % p.block_size;
            }
            slots_of = t;
          }
          const int64_t kv = int64_t{kv_head} * p.head_dim;
          const int64_t first_q = int64_t{kv_head} * group * p.head_dim;
          AttendGroup(q.data + t * q.cols + first_q, group, keys + kv, values + kv, slots.data(),
                      kv_shape_.kv_dim, len, p.head_dim, scale, scores.data(),
                      out.data + t * out.cols + first_q, p.softcap);
        }
      },
      // A causal prefill's later tokens attend to more positions: small chunks that the
      // threads claim in turn balance them, where one contiguous share each leaves the
      // thread with the earlier tokens idle most of the time.
      int64_t{pool_.size()} * 16);
}

void CpuBackend::SiluMul(Buffer gate, Buffer up, Buffer out) {
  ParallelRows(gate.rows, 8 * gate.cols, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * gate.cols;
    cpu::SiluMul(gate.data + first, up.data + first, (end - begin) * gate.cols, out.data + first);
  });
}

void CpuBackend::GeluTanhMul(Buffer gate, Buffer up, Buffer out) {
  ParallelRows(gate.rows, 8 * gate.cols, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * gate.cols;
    cpu::GeluTanhMul(gate.data + first, up.data + first, (end - begin) * gate.cols,
                     out.data + first);
  });
}

void CpuBackend::Scale(Buffer x, float s) {
  for (int64_t i = 0; i < x.rows * x.cols; ++i) x.data[i] *= s;
}

void CpuBackend::SoftCap(Buffer x, float cap) {
  for (int64_t i = 0; i < x.rows * x.cols; ++i) x.data[i] = cap * std::tanh(x.data[i] / cap);
}

void CpuBackend::Add(Buffer x, Buffer y) {
  for (int64_t i = 0; i < x.rows * x.cols; ++i) x.data[i] += y.data[i];
}

void CpuBackend::GatherRows(Buffer x, std::span<const int32_t> rows, Buffer out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(out.data + i * out.cols, x.data + rows[i] * x.cols, x.cols * sizeof(float));
  }
}

void CpuBackend::CopyToHost(Buffer x, float* host) {
  std::memcpy(host, x.data, static_cast<size_t>(x.rows * x.cols) * sizeof(float));
}

}  // namespace exa::engine::cpu
