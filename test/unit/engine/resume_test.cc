// Mid-stream failover at the engine (docs/architecture.md#failover): a request resumed on a
// fresh engine with its own earlier output as part of the prompt continues exactly where the
// first run was — the same greedy and seeded tokens, the same usage, a stop string that spans
// the seam still caught, and a character split by the seam sent once.
#include <catch2/catch.hpp>

#include "common/strings.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "test_models.h"

namespace exa::engine {
namespace {

using testing::AngleDetokenizer;
using testing::Collector;
using testing::SimOptions;

// Every event of one request: tokens, and the text the client had after each token.
struct Recorded {
  std::vector<int32_t> tokens;
  std::vector<size_t> text_after;  // bytes of text received once token i arrived
  std::string text;
  StreamEvent last;
};

StreamCallback Record(Recorded* r) {
  return [r](const StreamEvent& e) {
    r->text += e.text;
    if (e.token >= 0) {
      r->tokens.push_back(e.token);
      r->text_after.push_back(r->text.size());
    }
    if (e.finished) r->last = e;
  };
}

// Runs `request` alone on a fresh engine to its end.
Recorded Run(const EngineOptions& o, std::shared_ptr<const Detokenizer> detok,
             GenerateRequest request) {
  auto engine = CreateEngine(o, std::move(detok));
  REQUIRE(engine.ok());
  Recorded r;
  Collector done;
  request.callback = [&r, inner = done.Callback(0)](const StreamEvent& e) {
    Record (&r)(e);
    inner(e);
  };
  REQUIRE((*engine)->Submit(std::move(request)).ok());
  REQUIRE(done.WaitFinished(1));
  (*engine)->Stop();
  return r;
}

// `full`'s request resumed after `k` of its tokens, as a gateway would send it.
GenerateRequest Continuation(GenerateRequest request, const Recorded& full, size_t k) {
  request.prompt_tokens.insert(request.prompt_tokens.end(), full.tokens.begin(),
                               full.tokens.begin() + static_cast<ptrdiff_t>(k));
  request.resumed_tokens = static_cast<int32_t>(k);
  request.resumed_text_bytes = k == 0 ? 0 : full.text_after[k - 1];
  return request;
}

// Each token is one byte of "€" (three bytes) in turn, whatever its id; like the tokenizer's
// stream decoder, a stream holds an incomplete character back until it is whole.
class SplitCharDetokenizer final : public Detokenizer {
  class Stream final : public TextStream {
   public:
    std::string Push(int32_t) override {
      held_ += "\xE2\x82\xAC"[pushed_++ % 3];
      if (held_.size() < 3) return {};
      return std::exchange(held_, {});
    }

   private:
    int pushed_ = 0;
    std::string held_;
  };

 public:
  std::unique_ptr<TextStream> NewStream(bool /*keep_special_tokens*/) const override {
    return std::make_unique<Stream>();
  }
};

TEST_CASE("a resumed request continues with the tokens and usage of an unbroken run",
          "[engine][failover]") {
  auto dir = testing::WriteRandomModel("resume");
  EngineOptions o;
  o.model_dir = dir.string();
  o.threads = 2;
  o.kv_cache_bytes = 4 << 20;
  for (float temperature : {0.0f, 1.3f}) {
    GenerateRequest r;
    r.prompt_tokens = {7, 8, 9, 10, 11};
    r.max_tokens = 20;
    r.ignore_eos = true;
    r.sampling.temperature = temperature;
    r.sampling.top_k = 50;
    r.sampling.seed = 1234;
    const Recorded full = Run(o, nullptr, r);
    REQUIRE(full.tokens.size() == 20);
    for (size_t k : {size_t{1}, size_t{9}, size_t{19}}) {
      INFO("temperature " << temperature << ", resumed after " << k << " tokens");
      const Recorded rest = Run(o, nullptr, Continuation(r, full, k));
      std::vector<int32_t> joined(full.tokens.begin(),
                                  full.tokens.begin() + static_cast<ptrdiff_t>(k));
      joined.insert(joined.end(), rest.tokens.begin(), rest.tokens.end());
      CHECK(joined == full.tokens);
      CHECK(rest.last.finish_reason == FinishReason::kLength);
      CHECK(rest.last.prompt_tokens == 5);       // the client's prompt
      CHECK(rest.last.completion_tokens == 20);  // every token the client got, once
    }
  }
}

TEST_CASE("a stop string spanning the resume point is still caught", "[engine][failover]") {
  auto detok = std::make_shared<AngleDetokenizer>();
  GenerateRequest r;
  r.prompt_tokens = {20, 21, 22};
  r.max_tokens = 8;
  r.ignore_eos = true;
  const Recorded plain = Run(SimOptions(), detok, r);
  REQUIRE(plain.tokens.size() == 8);
  // "><t3": its first byte comes with token 2, the rest with token 3.
  r.stop_strings = {StrCat("><", plain.tokens[3])};
  const Recorded full = Run(SimOptions(), detok, r);
  REQUIRE(full.last.finish_reason == FinishReason::kStop);
  REQUIRE(full.text == StrCat("<", plain.tokens[0], "><", plain.tokens[1], "><", plain.tokens[2]));
  // Broken after token 2 (the client holds the text before the stop string's possible start).
  const Recorded rest = Run(SimOptions(), detok, Continuation(r, full, 3));
  CHECK(rest.last.finish_reason == FinishReason::kStop);
  CHECK(full.text.substr(0, full.text_after[2]) + rest.text == full.text);
}

TEST_CASE("a character split by the resume point is sent once", "[engine][failover]") {
  auto detok = std::make_shared<SplitCharDetokenizer>();
  GenerateRequest r;
  r.prompt_tokens = {20, 21, 22};
  r.max_tokens = 9;
  r.ignore_eos = true;
  const Recorded full = Run(SimOptions(), detok, r);
  REQUIRE(full.text == "€€€");
  for (size_t k : {size_t{1}, size_t{4}, size_t{5}, size_t{6}}) {
    INFO("resumed after " << k << " tokens");
    const Recorded rest = Run(SimOptions(), detok, Continuation(r, full, k));
    CHECK(full.text.substr(0, full.text_after[k - 1]) + rest.text == "€€€");
  }
}

TEST_CASE("a continuation whose output had already ended ends at once", "[engine][failover]") {
  // The first replica sent the last token and died before the end of the stream.
  auto detok = std::make_shared<AngleDetokenizer>();
  GenerateRequest r;
  r.prompt_tokens = {20, 21, 22};
  r.max_tokens = 5;
  r.ignore_eos = true;
  const Recorded full = Run(SimOptions(), detok, r);
  REQUIRE(full.tokens.size() == 5);
  const Recorded at_length = Run(SimOptions(), detok, Continuation(r, full, 5));
  CHECK(at_length.tokens.empty());
  CHECK(at_length.last.finish_reason == FinishReason::kLength);
  CHECK(at_length.last.completion_tokens == 5);
  GenerateRequest stop = r;
  stop.stop_token_ids = {full.tokens[2]};
  const Recorded at_stop = Run(SimOptions(), detok, Continuation(stop, full, 3));
  CHECK(at_stop.tokens.empty());
  CHECK(at_stop.last.finish_reason == FinishReason::kStop);
}

TEST_CASE("a continuation that does not add up is refused", "[engine][failover]") {
  auto engine = CreateEngine(SimOptions());
  REQUIRE(engine.ok());
  Collector c;
  GenerateRequest r;
  r.prompt_tokens = {20, 21, 22};
  r.max_tokens = 4;
  r.callback = c.Callback(0);
  for (int32_t resumed : {-1, 3, 4, 5}) {
    GenerateRequest bad = r;
    if (resumed == 5) bad.prompt_tokens = {20, 21, 22, 23, 24, 25};  // 5 > max_tokens 4
    bad.resumed_tokens = resumed;
    auto refused = (*engine)->Submit(bad);
    CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(refused.status().message()), Catch::Contains("resumed_tokens"));
  }
  (*engine)->Stop();
}

}  // namespace
}  // namespace exa::engine
