// Cross-backend check (ggml's test-backend-ops idea, STYLE.md "Tests"): each CUDA kernel and the
// whole forward pass against the CPU backend on the same fresh random inputs, relative error
// <= 1e-2 where bf16 storage is involved; greedy output identical on the bundled model.
//
// Needs an NVIDIA GPU. Without one this program prints why and exits 77, which ctest reports as
// skipped (SKIP_RETURN_CODE), never as passed.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "common/strings.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gpu.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine_test_util.h"
#include "kernels/add.h"
#include "kernels/convert.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/kv_store.h"
#include "kernels/paged_attention.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/silu_mul.h"
#include "test_models.h"

namespace exa::engine {
namespace {

using kernels::Dtype;

const std::string kTinyModel = EXA_SOURCE_DIR "/models/exa-tiny-arith";

// A device copy of a host vector, freed at scope exit.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, std::max<size_t>(1, size_) * sizeof(T)) == cudaSuccess);
    ptr_ = static_cast<T*>(p);
    REQUIRE(cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  explicit DeviceVector(size_t n) : DeviceVector(std::vector<T>(n)) {}
  ~DeviceVector() { cudaFree(ptr_); }
  T* get() const { return ptr_; }
  std::vector<T> Host() const {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<T> out(size_);
    REQUIRE(cudaMemcpy(out.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t size_;
};

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}

std::vector<float> RoundBf16(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToF32(F32ToBf16(v[i]));
  return out;
}

// max |a - b| / max |b|: relative to the reference's scale, so near-zero elements do not blow up.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return diff / scale;
}

// ||a - b||_2 / ||b||_2: the textbook relative error of a vector.
double RelativeErrorL2(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 1e-60;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff / norm);
}

Weight HostWeight(const std::vector<uint16_t>& bf16, int64_t rows, int64_t cols) {
  return Weight{bf16.data(), DType::kBF16, rows, cols};
}

TEST_CASE("rms_norm matches the CPU backend", "[gpu]") {
  std::mt19937 rng(1);
  const int64_t rows = 7, cols = 1000;
  const auto x = Random(rows * cols, rng, 3.0f);
  const auto w = ToBf16(Random(cols, rng));
  cpu::CpuBackend cpu(1);
  TensorView tv{DType::kBF16, {cols}, w.data(), w.size() * 2};
  auto cw = cpu.UploadWeight(tv);
  REQUIRE(cw.ok());
  std::vector<float> want(rows * cols);
  std::vector<float> xc = x;
  cpu.RmsNorm({xc.data(), rows, cols}, *cw, 1e-5f, {want.data(), rows, cols});

  DeviceVector<float> dx(x), dout(rows * cols);
  DeviceVector<uint16_t> dw(w);
  kernels::RmsNormParams p;
  p.x = dx.get();
  p.weight = dw.get();
  p.out = dout.get();
  p.weight_dtype = Dtype::kBF16;
  p.rows = rows;
  p.cols = cols;
  p.x_stride = p.out_stride = cols;
  p.eps = 1e-5f;
  REQUIRE(kernels::LaunchRmsNorm(p, nullptr).ok());
  CHECK(RelativeError(dout.Host(), want) <= 1e-5);
}

TEST_CASE("rope with llama3 scaling matches the CPU backend", "[gpu]") {
  std::mt19937 rng(2);
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 500000.0f;
  c.rope_scaling = RopeScaling::kLlama3;
  c.rope_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_positions = 8192;
  const std::vector<float> inv = RopeInverseFrequencies(c);
  BatchLayout layout;
  layout.positions = {0, 1, 17, 300, 4095, 100000};
  const int64_t t = 6, qc = 4 * 64, kc = 2 * 64;
  auto q = Random(t * qc, rng), k = Random(t * kc, rng);
  DeviceVector<float> dq(q), dk(k), dinv(inv);
  DeviceVector<int32_t> dpos(layout.positions);
  cpu::CpuBackend cpu(1);
  cpu.Rope({q.data(), t, qc}, {k.data(), t, kc}, 64, inv, layout);
  kernels::RopeParams p;
  p.q = dq.get();
  p.k = dk.get();
  p.positions = dpos.get();
  p.inv_freq = dinv.get();
  p.tokens = t;
  p.q_heads = 4;
  p.k_heads = 2;
  p.head_dim = 64;
  p.q_stride = qc;
  p.k_stride = kc;
  REQUIRE(kernels::LaunchRope(p, nullptr).ok());
  // Angles up to 1e5 radians: sincosf and the CPU's std::sin agree to a few ulps of the angle.
  CHECK(RelativeError(dq.Host(), q) <= 1e-3);
  CHECK(RelativeError(dk.Host(), k) <= 1e-3);
}

TEST_CASE("silu_mul, residual add, bias add and gathers match the CPU backend", "[gpu]") {
  std::mt19937 rng(3);
  const int64_t rows = 5, cols = 333;
  auto gate = Random(rows * cols, rng, 4.0f), up = Random(rows * cols, rng);
  cpu::CpuBackend cpu(1);
  std::vector<float> want(rows * cols);
  cpu.SiluMul({gate.data(), rows, cols}, {up.data(), rows, cols}, {want.data(), rows, cols});
  DeviceVector<float> dg(gate), du(up), dout(rows * cols);
  REQUIRE(kernels::LaunchSiluMul({dg.get(), du.get(), dout.get(), rows, cols, cols}, nullptr).ok());
  CHECK(RelativeError(dout.Host(), want) <= 1e-5);

  auto x = Random(rows * cols, rng), y = Random(rows * cols, rng);
  DeviceVector<float> dx(x), dy(y);
  std::vector<float> sum = x;
  cpu.Add({sum.data(), rows, cols}, {y.data(), rows, cols});
  kernels::AddParams a;
  a.x = dx.get();
  a.y = dy.get();
  a.rows = rows;
  a.cols = cols;
  a.x_stride = a.y_stride = cols;
  REQUIRE(kernels::LaunchAdd(a, nullptr).ok());
  CHECK(RelativeError(dx.Host(), sum) == 0);

  const auto bias = ToBf16(Random(cols, rng));
  DeviceVector<uint16_t> dbias(bias);
  a.y = nullptr;
  a.bias = dbias.get();
  a.bias_dtype = Dtype::kBF16;
  REQUIRE(kernels::LaunchAdd(a, nullptr).ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) sum[r * cols + i] += Bf16ToF32(bias[i]);
  }
  CHECK(RelativeError(dx.Host(), sum) <= 1e-6);

  const int64_t vocab = 50;
  const auto table = ToBf16(Random(vocab * cols, rng));
  const std::vector<int32_t> ids = {3, 49, 0, 3};
  std::vector<float> rows_want(ids.size() * cols);
  cpu.Embedding(HostWeight(table, vocab, cols), ids, {rows_want.data(), 4, cols});
  DeviceVector<uint16_t> dtable(table);
  DeviceVector<int32_t> dids(ids);
  DeviceVector<float> demb(ids.size() * cols);
  kernels::EmbeddingParams e;
  e.table = dtable.get();
  e.ids = dids.get();
  e.out = demb.get();
  e.table_dtype = Dtype::kBF16;
  e.table_rows = vocab;
  e.cols = e.table_stride = e.out_stride = cols;
  e.count = 4;
  REQUIRE(kernels::LaunchEmbedding(e, nullptr).ok());
  CHECK(RelativeError(demb.Host(), rows_want) == 0);
}

TEST_CASE("cuBLAS linear layers match the CPU backend at every batch size", "[gpu]") {
  std::mt19937 rng(4);
  const int64_t n = 200, k = 320;
  const auto w = ToBf16(Random(n * k, rng, 0.05f));
  DeviceVector<uint16_t> dw(w);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  DeviceVector<uint8_t> workspace(static_cast<size_t>(kernels::kCublasWorkspaceBytes));
  auto handle =
      kernels::CublasHandle::Create(stream, workspace.get(), kernels::kCublasWorkspaceBytes);
  REQUIRE(handle.ok());
  cpu::CpuBackend cpu(2);
  for (int64_t rows : {1, 3, 16, 33}) {
    INFO("rows " << rows);
    auto x = Random(rows * k, rng);
    std::vector<float> want(rows * n);
    const Weight hw = HostWeight(w, n, k);
    cpu.MatMul({x.data(), rows, k}, hw, nullptr, {want.data(), rows, n});
    DeviceVector<float> dx(x), dout(rows * n);
    DeviceVector<uint16_t> dxh(rows * k);
    REQUIRE(kernels::LaunchConvert({dx.get(), dxh.get(), Dtype::kBF16, rows, k, k}, stream).ok());
    kernels::GemmParams g;
    g.w = dw.get();
    g.x = dxh.get();
    g.out = dout.get();
    g.dtype = Dtype::kBF16;
    g.rows = rows;
    g.n = n;
    g.k = k;
    g.x_stride = k;
    g.out_stride = n;
    REQUIRE(kernels::Gemm(**handle, g).ok());
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(RelativeError(dout.Host(), want) <= 1e-2);
  }
  handle->reset();
  cudaStreamDestroy(stream);
}

// The decode GEMV (fp32 x, half weights) against the CPU's fp32 x bf16 product: the same
// arithmetic, so the tolerance is fp32 summation order, not bf16 rounding. Three targets in one
// launch (q/k/v-like, odd sizes so a block of warps straddles two targets), k not a multiple of
// 256 (the unrolled loop's tail), every row count.
TEST_CASE("the GEMV matches the CPU backend for 1 to 4 rows and rejects what it cannot take",
          "[gpu]") {
  std::mt19937 rng(5);
  const int64_t k = 328;
  const int64_t ns[] = {203, 37, 61};
  std::vector<std::vector<uint16_t>> w;
  std::deque<DeviceVector<uint16_t>> dw;  // DeviceVector owns device memory: never relocated
  for (int64_t n : ns) {
    w.push_back(ToBf16(Random(n * k, rng, 0.05f)));
    dw.emplace_back(w.back());
  }
  cpu::CpuBackend cpu(2);
  for (int64_t rows = 1; rows <= kernels::kGemvMaxRows; ++rows) {
    INFO("rows " << rows);
    auto x = Random(rows * k, rng);
    DeviceVector<float> dx(x);
    std::deque<DeviceVector<float>> dout;
    kernels::GemvParams v;
    v.num_targets = 3;
    v.w_dtype = Dtype::kBF16;
    v.x = dx.get();
    v.rows = rows;
    v.k = k;
    v.x_stride = k;
    for (int t = 0; t < 3; ++t) {
      dout.emplace_back(static_cast<size_t>(rows * ns[t]));
      v.targets[t] = {dw[t].get(), dout[t].get(), ns[t], ns[t]};
    }
    REQUIRE(kernels::LaunchGemv(v, nullptr).ok());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    for (int t = 0; t < 3; ++t) {
      INFO("target " << t);
      std::vector<float> want(rows * ns[t]);
      cpu.MatMul({x.data(), rows, k}, HostWeight(w[t], ns[t], k), nullptr,
                 {want.data(), rows, ns[t]});
      CHECK(RelativeError(dout[t].Host(), want) <= 1e-5);
    }
  }
  kernels::GemvParams bad;
  bad.targets[0] = {dw[0].get(), reinterpret_cast<float*>(dw[0].get()), ns[0], ns[0]};
  bad.x = reinterpret_cast<const float*>(dw[0].get());
  bad.rows = 5;
  bad.k = bad.x_stride = k;
  CHECK(bad.Validate().code() == absl::StatusCode::kInvalidArgument);  // rows > 4
  bad.rows = 1;
  bad.k = bad.x_stride = 327;
  CHECK(bad.Validate().code() == absl::StatusCode::kInvalidArgument);  // k not a multiple of 8
  bad.k = bad.x_stride = k;
  bad.w_dtype = Dtype::kF32;
  CHECK(bad.Validate().code() == absl::StatusCode::kInvalidArgument);
  bad.w_dtype = Dtype::kBF16;
  bad.num_targets = 4;
  CHECK(bad.Validate().code() == absl::StatusCode::kInvalidArgument);
  bad.num_targets = 1;
  CHECK(bad.Validate().ok());
}

// Prefill chunks, decodes and a long sequence in one step, GQA, bf16 cache. `decode_only`: one
// query token per sequence (the last position), the step shape DecodeAttentionKernel takes.
void CheckAttention(int64_t workspace_floats, int32_t heads = 8, int32_t kv_heads = 2,
                    int32_t dim = 64, bool decode_only = false) {
  std::mt19937 rng(5);
  const int32_t bs = 16, num_blocks = 64;
  const int32_t kv_dim = kv_heads * dim;
  // Three sequences with scattered blocks: prefill 0..39, decode at 700, chunk 100..105.
  std::vector<int32_t> order(num_blocks);
  for (int32_t i = 0; i < num_blocks; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  BatchLayout layout;
  layout.block_tables = {{order.begin(), order.begin() + 3},
                         {order.begin() + 3, order.begin() + 3 + 44},
                         {order.begin() + 47, order.begin() + 47 + 7}};
  auto add = [&](int32_t seq, int32_t from, int32_t to) {
    for (int32_t p = from; p < to; ++p) {
      layout.positions.push_back(p);
      layout.token_seq.push_back(seq);
      layout.slots.push_back(layout.block_tables[seq][p / bs] * bs + p % bs);
    }
  };
  // Cache contents first: every earlier position of each sequence, written in one StoreKv each.
  cpu::CpuBackend cpu(2);
  REQUIRE(cpu.AllocateKvCache({1, num_blocks, bs, kv_dim}).ok());
  const int64_t slots = int64_t{num_blocks} * bs;
  DeviceVector<uint16_t> kc(slots * kv_dim), vc(slots * kv_dim);
  auto store = [&](const BatchLayout& l) {
    const int64_t t = static_cast<int64_t>(l.positions.size());
    auto k = RoundBf16(Random(t * kv_dim, rng)), v = RoundBf16(Random(t * kv_dim, rng));
    cpu.StoreKv(0, {k.data(), t, kv_dim}, {v.data(), t, kv_dim}, l);
    DeviceVector<float> dk(k), dv(v);
    DeviceVector<int32_t> dslots(l.slots);
    kernels::KvStoreParams s;
    s.k = dk.get();
    s.v = dv.get();
    s.k_cache = kc.get();
    s.v_cache = vc.get();
    s.slots = dslots.get();
    s.cache_dtype = Dtype::kBF16;
    s.tokens = t;
    s.kv_dim = kv_dim;
    s.num_slots = slots;
    s.k_stride = s.v_stride = kv_dim;
    REQUIRE(kernels::LaunchKvStore(s, nullptr).ok());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  };
  add(0, 0, 40);
  add(1, 0, 701);
  add(2, 0, 106);
  store(layout);
  // The step: queries at the last positions of each sequence's run.
  BatchLayout step;
  step.block_tables = layout.block_tables;
  auto query = [&](int32_t seq, int32_t from, int32_t to) {
    for (int32_t p = from; p < to; ++p) {
      step.positions.push_back(p);
      step.token_seq.push_back(seq);
      step.slots.push_back(layout.block_tables[seq][p / bs] * bs + p % bs);
    }
  };
  if (decode_only) {
    query(0, 39, 40);
    query(1, 700, 701);
    query(2, 105, 106);
  } else {
    query(0, 0, 40);
    query(1, 700, 701);
    query(2, 100, 106);
  }
  const int32_t t = static_cast<int32_t>(step.positions.size());
  const auto q = Random(int64_t{t} * heads * dim, rng);
  std::vector<float> want(q.size());
  cpu.Attention(0, {const_cast<float*>(q.data()), t, heads * dim}, {heads, kv_heads, dim, bs}, step,
                {want.data(), t, heads * dim});

  std::vector<int32_t> first(t), count(t);
  const int32_t tiles = kernels::BuildAttentionTiles(step.positions, step.token_seq,
                                                     heads / kv_heads, first.data(), count.data());
  std::vector<int32_t> tables(3 * 44, 0);
  for (int s = 0; s < 3; ++s)
    std::copy(step.block_tables[s].begin(), step.block_tables[s].end(), tables.begin() + s * 44);
  DeviceVector<float> dq(q), dout(q.size()), ws(std::max<int64_t>(workspace_floats, 1));
  DeviceVector<int32_t> dpos(step.positions), dseq(step.token_seq), dfirst(first), dcount(count),
      dtables(tables);
  kernels::PagedAttentionParams p;
  p.q = dq.get();
  p.out = dout.get();
  p.k_cache = kc.get();
  p.v_cache = vc.get();
  p.cache_dtype = Dtype::kBF16;
  p.positions = dpos.get();
  p.token_seq = dseq.get();
  p.block_tables = dtables.get();
  p.tile_first = dfirst.get();
  p.tile_count = dcount.get();
  p.workspace = ws.get();
  p.workspace_floats = workspace_floats;
  p.tokens = t;
  p.tiles = tiles;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = dim;
  p.block_size = bs;
  p.block_table_stride = 44;
  p.num_slots = slots;
  p.q_stride = p.out_stride = heads * dim;
  p.plan = kernels::PlanPagedAttention(tiles, t, heads, kv_heads, dim, 701, workspace_floats);
  INFO("splits " << p.plan.splits << " partition " << p.plan.partition);
  REQUIRE(kernels::LaunchPagedAttention(p, nullptr).ok());
  CHECK(RelativeError(dout.Host(), want) <= 1e-3);
}

TEST_CASE("paged attention (prefill tiles, decode, GQA) matches the CPU backend", "[gpu]") {
  SECTION("one partition") { CheckAttention(0); }
  SECTION("split-K partitions merged") { CheckAttention(int64_t{4} << 20); }
  // Decode-only steps (the warp-per-key kernel): head dims 64, 128 and 256, groups 4 and 8.
  SECTION("decode, dim 128, 32 heads over 8") { CheckAttention(0, 32, 8, 128, true); }
  SECTION("decode, dim 128, split-K") { CheckAttention(int64_t{4} << 20, 32, 8, 128, true); }
  SECTION("decode, dim 64, 8 heads over 1") { CheckAttention(int64_t{4} << 20, 8, 1, 64, true); }
  SECTION("decode, dim 256, 8 heads over 2") { CheckAttention(0, 8, 2, 256, true); }
}

TEST_CASE("device sampling: greedy is argmax, top-k and top-p keep their sets", "[gpu]") {
  std::mt19937 rng(6);
  const int32_t vocab = 5000, rows = 64;
  auto logits = Random(int64_t{rows} * vocab, rng, 3.0f);
  std::vector<float> temperature(rows), top_p(rows), uniform(rows);
  std::vector<int32_t> top_k(rows);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (int r = 0; r < rows; ++r) {
    temperature[r] = r < 16 ? 0.0f : 0.8f;
    top_k[r] = r < 32 ? 0 : (r < 48 ? 5 : 0);
    top_p[r] = r >= 48 ? 0.3f : 1.0f;
    uniform[r] = u01(rng);
  }
  DeviceVector<float> dl(logits), dt(temperature), dp(top_p), du(uniform);
  DeviceVector<int32_t> dk(top_k), dtok(rows);
  kernels::SamplingParams p{dl.get(), dtok.get(), dt.get(), dk.get(), dp.get(),
                            du.get(), rows,       vocab,    vocab};
  REQUIRE(kernels::LaunchSampling(p, nullptr).ok());
  const auto tokens = dtok.Host();
  for (int r = 0; r < rows; ++r) {
    INFO("row " << r);
    const float* row = logits.data() + int64_t{r} * vocab;
    std::vector<int32_t> order(vocab);
    for (int32_t i = 0; i < vocab; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    const int32_t tok = tokens[r];
    REQUIRE(tok >= 0);
    REQUIRE(tok < vocab);
    if (r < 16) {
      CHECK(tok == order[0]);
    } else if (r >= 32 && r < 48) {
      CHECK(row[tok] >= row[order[4]]);
    } else if (r >= 48) {
      // Inside the nucleus: the most likely tokens whose mass first reaches 0.3.
      double total = 0, mass = 0;
      for (int32_t i = 0; i < vocab; ++i) total += std::exp((row[i] - row[order[0]]) / 0.8);
      size_t kept = 0;
      while (mass < 0.3 * total * (1 - 1e-4))
        mass += std::exp((row[order[kept++]] - row[order[0]]) / 0.8);
      // One more token is allowed: float sums on the device may put the boundary one later.
      CHECK(row[tok] >= row[order[std::min<size_t>(kept, vocab - 1)]]);
    }
  }
}

// A bf16 model of `config` on the CUDA backend against the CPU backend, through a prefill and
// decode steps; logits within 1e-2 of the CPU's. The CPU reference follows the GPU's precision
// policy (like with like): K and V rounded to the cache's type as they are stored, and a product
// of more than kGemvMaxRows rows taking bf16-rounded activations (cuBLAS multiplies half by
// half); decode-sized products take fp32 activations on both. Variants: fp32 and bf16 KV caches,
// and the prompt fed one token per step (every product through the fp32 GEMV). The error
// against a plain fp32 CPU (no rounding) is printed too: 1-2% on this random 2-layer model after
// a bf16 prefill, the cost of bf16 activations in cuBLAS, not of a kernel.
struct Backends {
  std::unique_ptr<cpu::CpuBackend> cpu, plain;
  std::unique_ptr<cuda::CudaBackend> gpu;
  std::unique_ptr<Model> cpu_model, plain_model, gpu_model;
};

Backends MakeBackends(const ModelConfig& cfg, const ModelWeights& weights,
                      std::shared_ptr<const cuda::DeviceWeights> shared, DType kv_dtype) {
  const ModelLimits limits{64, 8, 16};
  const KvCacheShape kv{cfg.num_layers, 16, 16, cfg.kv_dim()};
  Backends b;
  b.cpu = std::make_unique<cpu::CpuBackend>(2, kv_dtype);
  b.cpu->set_matmul_input_rounding(DType::kBF16, kernels::kGemvMaxRows + 1);
  b.plain = std::make_unique<cpu::CpuBackend>(2);  // fp32 everywhere: the informational figure
  cuda::CudaBackendOptions bo;
  bo.max_step_tokens = 64;
  bo.max_sequences = 8;
  bo.max_context = 256;
  bo.kv_block_size = 16;
  bo.kv_dtype = kv_dtype;
  bo.kv_cache_bytes = int64_t{16} * 16 * 2 * cfg.num_layers * cfg.kv_dim() *
                      static_cast<int64_t>(DTypeBytes(kv_dtype));  // 16 blocks
  auto gpu = cuda::CudaBackend::Create(cfg, bo, shared, weights);
  REQUIRE(gpu.ok());
  b.gpu = std::move(*gpu);
  for (auto [backend, model] :
       {std::pair<Backend*, std::unique_ptr<Model>*>{b.cpu.get(), &b.cpu_model},
        {b.plain.get(), &b.plain_model},
        {b.gpu.get(), &b.gpu_model}}) {
    REQUIRE(backend->AllocateKvCache(kv).ok());
    auto m = Model::Create(cfg, weights, backend, limits);
    REQUIRE(m.ok());
    *model = std::move(*m);
  }
  return b;
}

void CompareWithCpu(const char* family, const nlohmann::json& config) {
  const auto dir =
      testing::WriteRandomModel(StrCat("cuda-bf16-", family), config, DType::kBF16, 11);
  auto cfg = LoadModelConfig(dir.string());
  REQUIRE(cfg.ok());
  auto weights = ModelWeights::Load(dir.string(), *cfg);
  REQUIRE(weights.ok());
  auto shared = cuda::DeviceWeights::Acquire(0, StrCat("test-bf16-", family), **weights);
  REQUIRE(shared.ok());
  // {KV cache type, prompt fed one token per step}: one token per step runs every linear layer
  // through the fp32-input GEMV, the same arithmetic as the CPU's, so only summation order and
  // exp/rsqrt differ; a prompt in one chunk goes through cuBLAS on bf16-rounded activations.
  const std::pair<DType, bool> variants[] = {
      {DType::kF32, false}, {DType::kBF16, false}, {DType::kF32, true}};
  for (auto [kv_dtype, token_by_token] : variants) {
    INFO(family << ", KV cache " << DTypeName(kv_dtype)
                << (token_by_token ? ", token by token" : ""));
    Backends b = MakeBackends(*cfg, **weights, *shared, kv_dtype);
    // 18 prompt tokens: past the Gemma 3 config's 8-position window, across a KV block.
    std::vector<int32_t> tokens = {1,  5,  9,  33, 70, 2,  8,  91, 40,
                                   12, 13, 14, 60, 61, 62, 63, 64, 3};
    BatchLayout layout;
    layout.block_tables = {{4, 9}};
    const int32_t vocab = cfg->vocab_size;
    std::vector<float> want(vocab), got(vocab), fp32(vocab);
    const int32_t prompt = static_cast<int32_t>(tokens.size());
    const int steps = token_by_token ? prompt + 5 : 6;
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step);
      layout.positions.clear();
      layout.slots.clear();
      layout.token_seq.clear();
      const int32_t from = token_by_token
                               ? std::min(step, prompt - 1) + std::max(0, step - prompt + 1)
                           : step == 0 ? 0
                                       : static_cast<int32_t>(tokens.size()) - 1;
      const bool prompt_step = token_by_token && step < prompt - 1;
      const int32_t to = prompt_step ? from + 1 : static_cast<int32_t>(tokens.size());
      std::vector<int32_t> run(tokens.begin() + from, tokens.begin() + to);
      for (int32_t p = from; p < to; ++p) {
        layout.positions.push_back(p);
        layout.slots.push_back(layout.block_tables[0][p / 16] * 16 + p % 16);
        layout.token_seq.push_back(0);
      }
      const std::vector<int32_t> rows = {static_cast<int32_t>(run.size()) - 1};
      REQUIRE(b.cpu_model->Forward(run, layout, rows, want.data()).ok());
      REQUIRE(b.gpu_model->Forward(run, layout, rows, got.data()).ok());
      REQUIRE(b.plain_model->Forward(run, layout, rows, fp32.data()).ok());
      const double error = RelativeError(got, want);
      std::printf(
          "%s bf16 model, %s KV cache%s, step %d: relative error %.6f against the same precision "
          "policy on the CPU, %.6f against plain fp32 (L2 %.6f)\n",
          family, std::string(DTypeName(kv_dtype)).c_str(),
          token_by_token ? ", token by token" : "", step, error, RelativeError(got, fp32),
          RelativeErrorL2(got, fp32));
      CHECK(error <= 1e-2);
      if (prompt_step) continue;
      tokens.push_back(
          static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin()));
    }
  }
}

TEST_CASE("a bf16 model's logits match the CPU backend through prefill and decode", "[gpu]") {
  CompareWithCpu("llama", testing::SmallConfig());
  nlohmann::json qwen3 = testing::SmallConfig();
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  CompareWithCpu("qwen3", qwen3);
  // Sliding-window layers, their own rope base, a scale other than 1/sqrt(head_dim), the GELU
  // gate, the embedding scale and the normalised block outputs, on the device.
  CompareWithCpu("gemma3", testing::SmallGemma3Config());
  // Soft-capped scores and logits on the device.
  nlohmann::json gemma2 = testing::SmallGemma3Config();
  gemma2["architectures"] = {"Gemma2ForCausalLM"};
  gemma2["attn_logit_softcapping"] = 2.0;
  gemma2["final_logit_softcapping"] = 3.0;
  CompareWithCpu("gemma2", gemma2);
  // Fused projections read as views into one tensor, and a window on every layer.
  nlohmann::json phi3 = testing::SmallConfig();
  phi3["architectures"] = {"Phi3ForCausalLM"};
  phi3["sliding_window"] = 6;
  CompareWithCpu("phi3", phi3);
}

TEST_CASE("the bundled model's greedy output is identical on CPU and CUDA", "[gpu]") {
  auto run = [](const std::string& backend) {
    EngineOptions o;
    o.model_dir = kTinyModel;
    o.backend = backend;
    o.threads = 2;
    o.kv_cache_bytes = 8 << 20;
    testing::Collector c;
    auto engine = CreateEngine(o);
    REQUIRE(engine.ok());
    const std::vector<std::vector<int32_t>> prompts = {
        {0, 5, 6, 5, 7}, {0, 8, 9, 10, 11, 12, 7}, {0, 13, 4, 6, 13, 4, 7}};
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateRequest r;
      r.prompt_tokens = prompts[i];
      r.max_tokens = 12;
      r.ignore_eos = true;
      r.callback = c.Callback(static_cast<int>(i));
      REQUIRE((*engine)->Submit(std::move(r)).ok());
    }
    REQUIRE(c.WaitFinished(3));
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < 3; ++i) {
      REQUIRE(c.Get(i).status.ok());
      out.push_back(c.Get(i).tokens);
    }
    (*engine)->Stop();
    return out;
  };
  const auto cpu = run("cpu");
  const auto gpu = run("cuda");
  CHECK(gpu == cpu);
}

// Prefix caching on the GPU: sequences that take cached blocks attend over K and V another
// sequence wrote, through the same block tables; greedy outputs equal those with the cache off,
// one request at a time and all at once, and the cache was really hit.
TEST_CASE("the CUDA engine shares prefix-cache blocks: outputs equal those with the cache off",
          "[gpu]") {
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<int32_t> system = {
      0, 8, 9, 10, 11, 12, 5,  6, 5, 13, 4,  6,  13, 4, 8, 9, 10, 11, 12,
      5, 6, 5, 13, 4,  6,  13, 4, 8, 9,  10, 11, 12, 5, 6, 5, 13, 4};  // two full blocks and more
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p = system;
    for (int t = 0; t <= i % 5; ++t) p.push_back(4 + (i + t) % 9);
    p.push_back(7);
    prompts.push_back(std::move(p));
  }
  prompts.push_back(prompts[3]);  // a repeat
  auto run = [&](bool cache, bool together) {
    EngineOptions o;
    o.model_dir = kTinyModel;
    o.backend = "cuda";
    o.kv_cache_bytes = 8 << 20;
    o.prefix_cache.enabled = cache;
    testing::Collector c;
    auto engine = CreateEngine(o);
    REQUIRE(engine.ok());
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateRequest r;
      r.prompt_tokens = prompts[i];
      r.max_tokens = 10;
      r.ignore_eos = true;
      r.callback = c.Callback(static_cast<int>(i));
      REQUIRE((*engine)->Submit(std::move(r)).ok());
      if (!together) REQUIRE(c.WaitFinished(static_cast<int>(i) + 1));
    }
    REQUIRE(c.WaitFinished(static_cast<int>(prompts.size())));
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < prompts.size(); ++i) out.push_back(c.Get(static_cast<int>(i)).tokens);
    REQUIRE(testing::Eventually([&] { return (*engine)->Load().running == 0; }));
    if (cache && !together) CHECK((*engine)->Load().prefix_hit_tokens > 0);
    (*engine)->Stop();
    return out;
  };
  const auto off = run(false, false);
  CHECK(run(true, false) == off);
  CHECK(run(true, true) == off);
}

// Tokens chosen on the device (kernels/sampling.h through the engine): a seeded request repeats
// itself, top_k 1 is greedy, and a request the device cannot serve (log-probabilities) falls
// back to the host sampler in the same engine.
TEST_CASE("the engine samples on the GPU: seeded draws repeat, top_k 1 is greedy", "[gpu]") {
  EngineOptions o;
  o.model_dir = kTinyModel;
  o.backend = "cuda";
  o.kv_cache_bytes = 8 << 20;
  auto engine = CreateEngine(o);
  REQUIRE(engine.ok());
  testing::Collector c;
  auto submit = [&](int key, SamplingParams sampling) {
    GenerateRequest r;
    r.prompt_tokens = {0, 5, 6, 5, 7};
    r.max_tokens = 16;
    r.ignore_eos = true;
    r.sampling = sampling;
    r.callback = c.Callback(key);
    REQUIRE((*engine)->Submit(std::move(r)).ok());
  };
  SamplingParams seeded;
  seeded.temperature = 1.5f;
  seeded.top_p = 0.95f;
  seeded.seed = 42;
  SamplingParams top1;
  top1.temperature = 1.0f;
  top1.top_k = 1;
  top1.seed = 7;
  SamplingParams with_logprobs = seeded;
  with_logprobs.logprobs = true;
  submit(0, seeded);
  submit(1, seeded);
  submit(2, top1);
  submit(3, SamplingParams{});
  submit(4, with_logprobs);
  REQUIRE(c.WaitFinished(5));
  for (int i = 0; i < 5; ++i) REQUIRE(c.Get(i).status.ok());
  CHECK(c.Get(0).tokens == c.Get(1).tokens);
  CHECK(c.Get(2).tokens == c.Get(3).tokens);
  CHECK(c.Get(4).tokens.size() == 16);
  (*engine)->Stop();
}

TEST_CASE("replicas of one model on one GPU share a single weight copy", "[gpu]") {
  auto cfg = LoadModelConfig(kTinyModel);
  REQUIRE(cfg.ok());
  auto a = ModelWeights::Load(kTinyModel, *cfg);
  auto b = ModelWeights::Load(kTinyModel, *cfg);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto wa = cuda::DeviceWeights::Acquire(0, "tiny", **a);
  auto wb = cuda::DeviceWeights::Acquire(0, "tiny", **b);
  REQUIRE(wa.ok());
  REQUIRE(wb.ok());
  CHECK(wa->get() == wb->get());
  CHECK(cuda::DeviceWeights::SharedCount(*wa) == 2);
  const void* first = (*wa)->tensor(0).data;
  wa->reset();
  wb->reset();
  // The last replica gone, the copy is freed and a new replica loads a fresh one.
  auto wc = cuda::DeviceWeights::Acquire(0, "tiny", **a);
  REQUIRE(wc.ok());
  CHECK(cuda::DeviceWeights::SharedCount(*wc) == 1);
  (void)first;
}

TEST_CASE("a GPU that does not exist fails the replica, not the process", "[gpu]") {
  EngineOptions o;
  o.model_dir = kTinyModel;
  o.backend = "cuda";
  o.device = 4096;
  auto engine = CreateEngine(o);
  REQUIRE_FALSE(engine.ok());
  CHECK(engine.status().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace exa::engine

int main(int argc, char** argv) {
  const exa::engine::cuda::GpuInventory inv = exa::engine::cuda::DiscoverGpus();
  if (inv.devices.empty()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", inv.note.c_str());
    return 77;  // ctest SKIP_RETURN_CODE
  }
  std::printf("GPU 0: %s, driver CUDA %s\n", inv.devices[0].name.c_str(),
              inv.driver_version.c_str());
  return Catch::Session().run(argc, argv);
}
