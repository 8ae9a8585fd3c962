// Host-side halves of the CUDA kernels, checked without a GPU: argument validation names the
// field and what is allowed, the split-K attention plan covers every key within its workspace,
// and query tiles never mix sequences or skip positions.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kernels/paged_attention.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"

namespace exa::kernels {
namespace {

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("kernel params name the bad field and the rule", "[cuda]") {
  float x[4] = {};
  RmsNormParams r;
  r.x = x;
  r.out = x;
  r.weight = x;
  r.rows = 1;
  r.cols = 4;
  r.x_stride = 4;
  r.out_stride = 4;
  CHECK(r.Validate().ok());
  r.x_stride = 3;
  CHECK(r.Validate().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(r.Validate()) == "rms_norm: x_stride 3: must be at least cols");
  r.x_stride = 4;
  r.weight = nullptr;
  CHECK(Message(r.Validate()) == "rms_norm: weight is null");

  RopeParams p;
  p.q = p.k = x;
  int32_t pos = 0;
  p.positions = &pos;
  p.inv_freq = x;
  p.tokens = 1;
  p.q_heads = p.k_heads = 1;
  p.head_dim = 3;
  p.q_stride = p.k_stride = 4;
  CHECK(Message(p.Validate()) == "rope: head_dim 3: must be even and at least 2");

  SamplingParams s;
  CHECK(Message(s.Validate()) == "sampling: logits is null");
}

PagedAttentionParams ValidAttention(float* f, int32_t* i) {
  PagedAttentionParams p;
  p.q = p.out = f;
  p.k_cache = p.v_cache = f;
  p.positions = p.token_seq = p.block_tables = p.tile_first = p.tile_count = i;
  p.tokens = p.tiles = 1;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.block_table_stride = 1;
  p.num_slots = 16;
  p.q_stride = p.out_stride = 512;
  p.plan = {1, 128};
  return p;
}

TEST_CASE("paged attention rejects shapes the kernel cannot run", "[cuda]") {
  float f[1];
  int32_t i[1];
  CHECK(ValidAttention(f, i).Validate().ok());
  auto p = ValidAttention(f, i);
  p.num_heads = 7;
  CHECK(Message(p.Validate()) ==
        "paged_attention: num_heads 7: must be a multiple of num_kv_heads");
  p = ValidAttention(f, i);
  p.head_dim = 100;
  CHECK(Message(p.Validate()) ==
        "paged_attention: head_dim 100: must be a multiple of 8 in [8, 256]");
  p = ValidAttention(f, i);
  p.num_heads = 64;
  p.num_kv_heads = 2;
  p.q_stride = p.out_stride = 64 * 64;
  CHECK(Message(p.Validate()) ==
        "paged_attention: group size 32: must be at most 16 query heads per KV head");
  p = ValidAttention(f, i);
  p.plan = {4, 128};  // four splits need a workspace
  CHECK(Message(p.Validate()) == "paged_attention: workspace is null");
}

TEST_CASE("the attention plan covers every key and fits its workspace", "[cuda]") {
  for (int32_t context : {1, 100, 255, 2048, 8192, 32768}) {
    for (int32_t tokens : {1, 16, 64, 512}) {
      const int64_t ws = int64_t{8} << 20;
      const PagedAttentionPlan plan = PlanPagedAttention(tokens, tokens, 32, 8, 128, context, ws);
      INFO("context " << context << " tokens " << tokens);
      CHECK(plan.splits >= 1);
      CHECK(plan.partition % kAttentionChunk == 0);
      CHECK(int64_t{plan.splits} * plan.partition >= context);
      CHECK(int64_t{plan.splits - 1} * plan.partition < context);  // no empty partition
      CHECK(PagedAttentionWorkspaceFloats(plan, tokens, 32, 128) <= ws);
    }
  }
  // A single long decode is split (flash-decoding); a short one is not.
  CHECK(PlanPagedAttention(1, 1, 32, 8, 128, 8192, int64_t{8} << 20).splits > 1);
  CHECK(PlanPagedAttention(1, 1, 32, 8, 128, 200, int64_t{8} << 20).splits == 1);
  // No workspace: one partition, whatever the length.
  CHECK(PlanPagedAttention(1, 1, 32, 8, 128, 8192, 0).splits == 1);
}

TEST_CASE("query tiles are runs of one sequence's consecutive positions", "[cuda]") {
  // Sequence 0 prefills 0..9, sequence 1 decodes at 40, sequence 2 prefills 5..7.
  std::vector<int32_t> positions, seq;
  for (int32_t p = 0; p < 10; ++p) positions.push_back(p), seq.push_back(0);
  positions.push_back(40), seq.push_back(1);
  for (int32_t p = 5; p < 8; ++p) positions.push_back(p), seq.push_back(2);
  std::vector<int32_t> first(positions.size()), count(positions.size());
  // Group 4: tiles of up to 4 tokens.
  const int32_t tiles = BuildAttentionTiles(positions, seq, 4, first.data(), count.data());
  REQUIRE(tiles == 5);
  CHECK(std::vector<int32_t>(first.begin(), first.begin() + tiles) ==
        std::vector<int32_t>{0, 4, 8, 10, 11});
  CHECK(std::vector<int32_t>(count.begin(), count.begin() + tiles) ==
        std::vector<int32_t>{4, 4, 2, 1, 3});
  // Group 16: one token per tile.
  CHECK(BuildAttentionTiles(positions, seq, 16, first.data(), count.data()) ==
        static_cast<int32_t>(positions.size()));
}

}  // namespace
}  // namespace exa::kernels
