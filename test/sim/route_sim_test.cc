// A seconds-long run of `exaserve-bench route --mode sim` (the full benchmark is not part of the
// test suite): the JSON has the documented shape, the figures are sane (every request completes
// under light load, latencies ordered, goodput near the offered load), and a fixed seed gives the
// same answer twice.
#include <cstdio>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "bench/lru_blocks.h"
#include "bench/route_bench.h"
#include "support/temp_dir.h"
#include "traces/trace.h"

namespace exa::bench {
namespace {

RouteSimOptions Small() {
  RouteSimOptions o;
  o.replicas = 4;
  o.replicas_per_node = 2;
  o.gateways = 2;
  o.rhos = {0.5};
  o.policies = {"token-aware", "round-robin"};
  o.requests = 300;
  o.capacity_requests = 300;
  return o;
}

TEST_CASE("route sim: JSON shape, sanity and reproducibility", "[sim][route]") {
  auto out = RunRouteSim(Small());
  REQUIRE(out.ok());
  const nlohmann::json& j = *out;
  CHECK(j["mode"] == "sim");
  const double capacity = j["capacity"]["total_requests_per_s"].get<double>();
  CHECK(capacity > 4 * 1.0);   // a 13B replica does a few requests per second...
  CHECK(capacity < 4 * 20.0);  // ...not dozens
  REQUIRE(j["results"].size() == 2);
  for (const auto& r : j["results"]) {
    CHECK(r["completed"] == 300);
    CHECK(r["rejections"] == 0);
    CHECK(r["failed"] == 0);
    const double ttft50 = r["ttft_ms"]["p50"], ttft99 = r["ttft_ms"]["p99"];
    const double e2e50 = r["e2e_ms"]["p50"], e2e99 = r["e2e_ms"]["p99"];
    CHECK(ttft50 > 0);
    CHECK(ttft50 <= ttft99);
    CHECK(e2e50 > ttft50);
    CHECK(e2e50 <= e2e99);
    // ~200 tokens at >= 20 ms a step: a median request takes seconds.
    CHECK(e2e50 > 2000);
    const double goodput = r["goodput"]["requests_per_s"];
    CHECK(goodput == Approx(0.5 * capacity).epsilon(0.35));
  }
  REQUIRE(j["comparisons"].size() == 1);
  CHECK(j["comparisons"][0].contains("round-robin"));
  auto again = RunRouteSim(Small());
  REQUIRE(again.ok());
  // Everything but the decisions' and the hashing's wall time is deterministic.
  const auto without_timing = [](nlohmann::json out) {
    for (auto& r : out["results"]) {
      CHECK(r["decision_us"]["p99"].get<double>() > 0);
      r.erase("decision_us");
      r.erase("prompt_hash_us");
    }
    return out.dump();
  };
  CHECK(without_timing(*again) == without_timing(j));
}

TEST_CASE("route sim: bad options are refused naming the field", "[sim][route]") {
  RouteSimOptions o = Small();
  o.policies = {"fastest"};
  auto out = RunRouteSim(o);
  REQUIRE(out.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(out.status().message()).find("fastest") != std::string::npos);
  o = Small();
  o.rhos = {0};
  CHECK(RunRouteSim(o).status().code() == absl::StatusCode::kInvalidArgument);
}

// A Mooncake-format trace of multi-turn conversations: each turn re-sends the conversation so far
// (its block ids) and adds two blocks; arrivals interleave the conversations.
std::string WriteConversations(const testing::TempDir& dir, int conversations, int turns) {
  const std::string path = (dir.path / "conversations.jsonl").string();
  std::ofstream out(path);
  int64_t next_id = 1000;
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(conversations));
  int64_t ms = 0;
  for (int t = 0; t < turns; ++t) {
    for (int c = 0; c < conversations; ++c) {
      auto& conv = ids[static_cast<size_t>(c)];
      conv.push_back(next_id++);
      conv.push_back(next_id++);
      out << "{\"timestamp\": " << ms << ", \"input_length\": " << conv.size() * 512 - 100
          << ", \"output_length\": 40, \"hash_ids\": [";
      for (size_t i = 0; i < conv.size(); ++i) out << (i ? ", " : "") << conv[i];
      out << "]}\n";
      ms += 250;
    }
  }
  return path;
}

TEST_CASE("route sim: on a trace of conversations kv-token-aware reuses the cache",
          "[sim][route]") {
  testing::TempDir dir;
  RouteSimOptions o = Small();
  o.trace = WriteConversations(dir, 12, 3);  // prompts of 924 to 2 972 tokens
  o.replicas = 6;
  o.replicas_per_node = 3;
  o.policies = {"kv-token-aware", "round-robin"};
  o.requests = 36;
  o.warmup_fraction = 0;
  o.capacity_requests = 30;
  auto out = RunRouteSim(o);
  REQUIRE(out.ok());
  const nlohmann::json& j = *out;
  CHECK(j["workload"]["format"] == "mooncake");
  const auto& kv = j["results"][0];
  const auto& rr = j["results"][1];
  CHECK(kv["completed"] == 36);
  CHECK(rr["completed"] == 36);
  // Turns 2 and 3 repeat their conversation's earlier blocks: 2/3 of their prompts could hit.
  const double unbounded = kv["unbounded_cache_hit_ratio"];
  CHECK(unbounded > 0.4);
  const double kv_hits = kv["prefix_hit_ratio"], rr_hits = rr["prefix_hit_ratio"];
  CHECK(kv_hits >= 0.8 * unbounded);
  CHECK(kv_hits > rr_hits + 0.15);
  // The pooled reference holds far more than these prompts: it hits what the unbounded one does.
  CHECK(kv["pooled_lru_cache_hit_ratio"] == unbounded);
}

TEST_CASE("route sim: the LRU reference keeps the most recent blocks and counts leading hits",
          "[sim][route]") {
  const Hash128 a{1, 1}, b{2, 2}, c{3, 3}, d{4, 4};
  LruBlocks lru(3);
  CHECK(lru.Touch({a, b}) == 0);
  CHECK(lru.Touch({a, b, c}) == 2);
  CHECK(lru.Touch({a}) == 1);        // a is now the most recent; b the least
  CHECK(lru.Touch({d}) == 0);        // over capacity: b goes
  CHECK(lru.Touch({b, a, c}) == 0);  // a held, but the prefix starts at b; b back in, d out
  CHECK(lru.Touch({a, c, b}) == 3);
  CHECK(lru.Touch({d}) == 0);
}

TEST_CASE("route sim: the pooled cache reference forgets what the replicas' KV cannot hold",
          "[sim][route]") {
  testing::TempDir dir;
  RouteSimOptions o = Small();
  o.trace = WriteConversations(dir, 12, 3);  // 36 864 distinct prompt tokens
  o.replicas = 6;
  o.replicas_per_node = 3;
  o.kv_tokens = 4096;  // 24 576 tokens in all
  o.policies = {"kv-token-aware"};
  o.requests = 36;
  o.warmup_fraction = 0;
  o.capacity_requests = 30;
  auto out = RunRouteSim(o);
  REQUIRE(out.ok());
  const auto& kv = (*out)["results"][0];
  const double unbounded = kv["unbounded_cache_hit_ratio"];
  const double pooled = kv["pooled_lru_cache_hit_ratio"];
  CHECK(unbounded > 0.4);
  // It still holds the blocks of the turns just before (0.21 against 0.49 measured).
  CHECK(pooled < 0.75 * unbounded);
  CHECK(pooled > 0.1);
}

// Writes `text` to the file `name` in `dir` and reads it as a trace.
absl::StatusOr<traces::Trace> TraceOf(const testing::TempDir& dir, const std::string& name,
                                      const std::string& text) {
  const std::string path = (dir.path / name).string();
  std::ofstream(path) << text;
  return traces::ReadTrace(path);
}

bool Names(const absl::Status& s, const std::string& what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

TEST_CASE("traces: Mooncake and CSV traces read, bad lines named", "[sim][route]") {
  testing::TempDir dir;
  const std::string azure =
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\n";
  auto t = TraceOf(dir, "azure.csv", azure);
  REQUIRE(t.ok());
  CHECK(t->format == "azure");
  REQUIRE(t->requests.size() == 2);
  CHECK(t->requests[1].arrival_s == Approx(4.3145789));
  CHECK(t->requests[1].input_length == 396);
  CHECK(t->requests[1].output_length == 109);
  auto bad = TraceOf(dir, "azure.csv", azure + "2023-11-16 18:15:51,-3,5\n");
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Names(bad.status(), ":4:"));
  auto m = TraceOf(dir, "mooncake.jsonl",
                   "\xEF\xBB\xBF{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, "
                   "\"hash_ids\": [1, 2]}\n"
                   "{\"timestamp\": 10, \"input_length\": 600}\n");
  REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Names(m.status(), ":2:"));
  CHECK(traces::ReadTrace("/nonexistent/trace").status().code() == absl::StatusCode::kNotFound);
  // Equal block ids give equal tokens; the tail past the ids is the request's own.
  traces::TraceRequest a{0, 600, 5, {1, 2}}, b{0, 600, 5, {1, 3}};
  auto ta = traces::TracePromptTokens(a, 0, 256), tb = traces::TracePromptTokens(b, 1, 256);
  CHECK(std::equal(ta.begin(), ta.begin() + 512, tb.begin()));
  CHECK_FALSE(std::equal(ta.begin() + 512, ta.end(), tb.begin() + 512));
}

TEST_CASE("traces: other CSV traces read by their column names", "[sim][route]") {
  // Azure 2024's UTC offsets, BurstGPT's seconds and column names, quotes, CRLF line ends,
  // columns in another order, columns not read, a byte order mark.
  testing::TempDir dir;
  auto t24 = TraceOf(dir, "azure2024.csv",
                     "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                     "2024-05-10 00:00:00.009930+00:00,4808,10\r\n"
                     "2024-05-10 02:00:01.5+02:00,3180,8\r\n");
  REQUIRE(t24.ok());
  CHECK(t24->format == "azure");
  REQUIRE(t24->requests.size() == 2);
  CHECK(t24->requests[1].arrival_s == Approx(1.49007));  // 00:00:01.5 UTC
  const std::string burst =
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "\"45\",GPT-4,\"1087\",\"230\",1317,API log\n"
      "2.5,ChatGPT,12,0,12,Conversation log\n";
  auto tburst = TraceOf(dir, "burstgpt.csv", burst);
  REQUIRE(tburst.ok());
  CHECK(tburst->format == "csv");
  REQUIRE(tburst->requests.size() == 3);
  CHECK(tburst->requests[0].input_length == 12);  // arrival order: 2.5 s first
  CHECK(tburst->requests[1].arrival_s == Approx(2.5));
  CHECK(tburst->requests[2].input_length == 1087);
  CHECK(tburst->requests[2].output_length == 230);
  CHECK(tburst->duration_s == Approx(42.5));
  auto ti = TraceOf(dir, "iso.csv",
                    "\xEF\xBB\xBFoutput_length,input_length,arrival_time\n"
                    "7,100,2024-01-01T00:00:00Z\n"
                    "9,200,2024-01-01T00:00:03.25Z\n");
  REQUIRE(ti.ok());
  CHECK(ti->requests[1].arrival_s == Approx(3.25));
  CHECK(ti->requests[1].input_length == 200);
  CHECK(ti->requests[1].output_length == 9);
  auto tn = TraceOf(dir, "nameless.csv", "when,prompt,answer\n1,2,3\n");
  REQUIRE(tn.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Names(tn.status(), "header \"when,prompt,answer\""));
  auto late = TraceOf(dir, "burstgpt.csv", burst + "yesterday,ChatGPT,5,5,10,Conversation log\n");
  REQUIRE(late.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Names(late.status(), ":5: time \"yesterday\""));
}

}  // namespace
}  // namespace exa::bench
