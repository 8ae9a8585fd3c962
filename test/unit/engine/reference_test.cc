// Proves our forward pass computes the same logits as an independent PyTorch implementation
// (scripts/reference-logits.py) to relative error <= 1e-4, on the bundled tiny model (Llama,
// F32), a random Qwen2-style model (q/k/v bias, GQA, rope_theta 5e5 with llama3 scaling,
// tied embeddings, BF16), a random Qwen3-style model (q and k normalised per head, heads wider
// than hidden / heads, GQA, tied embeddings, BF16) and a random Gemma 3-style model (1 + w norms,
// a scaled embedding, sliding-window layers of 5 positions with their own rope base beside global
// ones with linear rope scaling, normalised block outputs, a GELU gate) and a random Phi-3-style
// model (fused q/k/v and gate/up projections, a 9-position window on every layer) and a random
// Gemma 2-style model (soft-capped scores and logits, the even layers sliding), for every
// position, with
// prefill split into chunks that cross KV block boundaries (64, 7, and one token a step as decode
// runs), and on every kernel path the CPU
// supports (scalar, AVX2, AVX-512, AVX512-BF16); and how far activations rounded to bf16
// (EngineOptions::cpu_bf16_activations) move them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/strings.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/kernels.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace exa::engine {
namespace {

const std::string kData = EXA_SOURCE_DIR "/test/data/engine";

struct Golden {
  std::vector<int32_t> prompt;
  const TensorView* logits;
};

// max |ours - ref| / max |ref| over one position's logits.
double RelativeError(const float* ours, const float* ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double{ours[i]} - ref[i]));
    scale = std::max(scale, std::fabs(double{ref[i]}));
  }
  return diff / scale;
}

// Prefills `prompt` in chunks of `chunk` tokens, returning logits for every position.
std::vector<float> RunPrefill(Model& model, KvCache& cache, const std::vector<int32_t>& prompt,
                              int32_t chunk) {
  const int32_t vocab = model.config().vocab_size;
  std::vector<float> all(prompt.size() * vocab);
  std::vector<int32_t> table;
  REQUIRE(cache.Grow(&table, static_cast<int32_t>(prompt.size())));
  for (size_t start = 0; start < prompt.size(); start += chunk) {
    const size_t end = std::min(prompt.size(), start + chunk);
    BatchLayout layout;
    layout.block_tables = {table};
    std::vector<int32_t> rows;
    for (size_t p = start; p < end; ++p) {
      layout.positions.push_back(static_cast<int32_t>(p));
      layout.slots.push_back(cache.Slot(table, static_cast<int32_t>(p)));
      layout.token_seq.push_back(0);
      rows.push_back(static_cast<int32_t>(p - start));
    }
    std::span<const int32_t> tokens(prompt.data() + start, end - start);
    REQUIRE(model.Forward(tokens, layout, rows, all.data() + start * vocab).ok());
  }
  cache.Free(&table);
  return all;
}

double MaxErrorOverGoldens(const std::string& model_dir, const std::string& golden_file,
                           int32_t chunk, bool bf16_activations = false) {
  auto config = LoadModelConfig(model_dir);
  REQUIRE(config.ok());
  auto weights = ModelWeights::Load(model_dir, *config);
  INFO(std::string(ToStd(weights.status().message())));
  REQUIRE(weights.ok());
  auto golden = SafetensorsFile::Open(golden_file);
  REQUIRE(golden.ok());
  cpu::CpuBackend backend(2);
  if (bf16_activations) backend.set_matmul_input_rounding(DType::kBF16, 1);
  KvCache cache(16, 16);
  REQUIRE(backend.AllocateKvCache({config->num_layers, 16, 16, config->kv_dim()}).ok());
  auto model = Model::Create(*config, **weights, &backend, {64, 64, 16});
  REQUIRE(model.ok());
  double worst = 0;
  for (int i = 0;; ++i) {
    auto p = (*golden)->tensors().find(StrCat("prompt_", i));
    if (p == (*golden)->tensors().end()) break;
    const float* ids = static_cast<const float*>(p->second.data);
    std::vector<int32_t> prompt(ids, ids + p->second.NumElements());
    const TensorView& ref = (*golden)->tensors().at(StrCat("logits_", i));
    REQUIRE(ref.shape ==
            std::vector<int64_t>{static_cast<int64_t>(prompt.size()), config->vocab_size});
    std::vector<float> ours = RunPrefill(**model, cache, prompt, chunk);
    for (size_t t = 0; t < prompt.size(); ++t) {
      const float* r = static_cast<const float*>(ref.data) + t * config->vocab_size;
      worst = std::max(worst,
                       RelativeError(ours.data() + t * config->vocab_size, r, config->vocab_size));
    }
    CHECK(cache.used_blocks() == 0);
  }
  return worst;
}

TEST_CASE("logits match the PyTorch reference on every config", "[engine][reference]") {
  struct Case {
    std::string model, golden;
  } cases[] = {{EXA_SOURCE_DIR "/models/exa-tiny-arith", kData + "/tiny-arith-golden.safetensors"},
               {kData + "/random-qwen2", kData + "/random-qwen2-golden.safetensors"},
               {kData + "/random-qwen3", kData + "/random-qwen3-golden.safetensors"},
               {kData + "/random-gemma3", kData + "/random-gemma3-golden.safetensors"},
               {kData + "/random-phi3", kData + "/random-phi3-golden.safetensors"},
               {kData + "/random-gemma2", kData + "/random-gemma2-golden.safetensors"}};
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    REQUIRE(cpu::ForceIsa(isa));
    for (const Case& c : cases) {
      for (int32_t chunk : {64, 7, 1}) {
        double err = MaxErrorOverGoldens(c.model, c.golden, chunk);
        INFO(c.model << " chunk " << chunk << " " << cpu::IsaName(isa) << " max rel error " << err);
        CHECK(err <= 1e-4);
        WARN("max relative error " << err << " for " << c.model << " (chunk " << chunk << ", "
                                   << cpu::IsaName(isa) << ")");
      }
    }
  }
  cpu::ForceIsa(std::nullopt);
}

TEST_CASE("bf16 activations stay close to the reference on every path", "[engine][reference]") {
  // EngineOptions::cpu_bf16_activations rounds x to bf16 before products with bf16 weights: the
  // numerics of a bf16 model run in bf16. Each rounding is at most 2^-9 relative, but through
  // this random model's layers the logits move by a few percent, not 1e-4: measured 2026-12-04,
  // 0.041 of the largest logit on every path (the same within 1e-4 across paths, so the rounding
  // moves them, not a kernel). The bundled model with bf16 weights still answers all 1000
  // held-out sums with it (docs/perf/engine.md#bf16-activations).
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    REQUIRE(cpu::ForceIsa(isa));
    const double err =
        MaxErrorOverGoldens(kData + "/random-qwen2", kData + "/random-qwen2-golden.safetensors", 7,
                            /*bf16_activations=*/true);
    INFO(cpu::IsaName(isa) << " max rel error " << err);
    CHECK(err <= 0.08);
    WARN("bf16 activations: max relative error " << err << " (" << cpu::IsaName(isa) << ")");
  }
  cpu::ForceIsa(std::nullopt);
}

}  // namespace
}  // namespace exa::engine
