// The Frontend's failover: a replica that fails before the first token is retried once on another
// replica, invisibly to the client; one that fails, stalls or is suspected after it is replaced by
// a continuation on another replica, and the client's stream goes on with each token once; past
// the bounds the client gets the error; a cancelled request is never retried (and counts as
// cancelled). Validation errors carry the field they name.
#include "gateway/frontend.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "engine/tokenizer_detokenizer.h"
#include "fake_backend.h"

namespace exa::gateway {
namespace {

struct Fixture {
  explicit Fixture(GatewayOptions options = {})
      : table(router::Policy::kRoundRobin, 1), frontend(options, backend, table, registry) {
    for (const char* id : {"n1/m@v1#0", "n2/m@v1#0", "n3/m@v1#0"}) {
      table.Upsert({id, "m", "v1", {}});
      table.Report(id, {0, 0, true});
    }
  }
  std::shared_ptr<Call> Start() {
    TextRequest r;
    r.prompt = "1+1=";
    r.max_tokens = 4;
    auto call = frontend.Start(r, [this](const engine::StreamEvent& e) { events.push_back(e); });
    REQUIRE(call.ok());
    return *call;
  }
  metrics::Registry registry;
  FakeBackend backend;
  router::ReplicaTable table;
  Frontend frontend;
  std::vector<engine::StreamEvent> events;
};

TEST_CASE("A replica failing before the first token is retried on another replica") {
  Fixture f;
  auto call = f.Start();
  REQUIRE(f.backend.submitted.size() == 1);
  std::string first = f.backend.submitted[0].first;
  f.backend.Finish(0, absl::UnavailableError("node went away"));
  REQUIRE(f.backend.submitted.size() == 2);
  CHECK(f.backend.submitted[1].first != first);
  CHECK(f.backend.submitted[1].second.prompt_tokens == f.backend.submitted[0].second.prompt_tokens);
  CHECK(call->replica_id() == f.backend.submitted[1].first);
  CHECK(f.events.empty());  // the client saw nothing of the failed attempt
  f.backend.Token(1, 17);
  f.backend.Finish(1, absl::OkStatus());
  REQUIRE(f.events.size() == 2);
  CHECK(f.events.back().finished);
  CHECK(f.events.back().status.ok());
  CHECK(f.frontend.in_flight() == 0);
  for (const auto& r : f.table.List()) CHECK(r.open_requests == 0);
}

bool Has(const std::string& metrics, const std::string& line) {
  return metrics.find(line) != std::string::npos;
}

TEST_CASE("A failure after the first token continues the stream on another replica") {
  Fixture f;
  auto call = f.Start();
  absl::SleepFor(absl::Milliseconds(2));
  f.backend.Token(0, 17);
  f.backend.Token(0, 18);
  f.backend.Finish(0, absl::UnavailableError("node went away"));
  REQUIRE(f.backend.submitted.size() == 2);
  const engine::GenerateRequest& first = f.backend.submitted[0].second;
  const engine::GenerateRequest& next = f.backend.submitted[1].second;
  CHECK(f.backend.submitted[1].first != f.backend.submitted[0].first);
  std::vector<int32_t> expected = first.prompt_tokens;
  expected.insert(expected.end(), {17, 18});
  CHECK(next.prompt_tokens == expected);
  CHECK(next.resumed_tokens == 2);
  CHECK(next.resumed_text_bytes == 2);
  CHECK(next.max_tokens == first.max_tokens);
  REQUIRE(first.sampling.seed.has_value());  // the gateway chose one
  CHECK(next.sampling.seed == first.sampling.seed);
  CHECK(call->seed() == *first.sampling.seed);
  CHECK(next.attempt == 1);
  CHECK(next.request_id == first.request_id);
  CHECK(f.events.size() == 2);  // the two tokens; no error
  f.backend.Token(0, 99);       // the old attempt, late: never reaches the client
  f.backend.Token(1, 19);
  f.backend.Finish(1, absl::OkStatus());
  REQUIRE(f.events.size() == 4);
  CHECK(f.events[2].token == 19);
  CHECK(f.events[3].finished);
  CHECK(f.events[3].status.ok());
  CHECK(f.events[3].completion_tokens == 3);
  CHECK(f.events[3].time_to_first_token_ms >= 2);  // from admission, across the resume
  CHECK(f.events[3].prompt_tokens == static_cast<int32_t>(first.prompt_tokens.size()));
  CHECK(f.frontend.in_flight() == 0);
  for (const auto& r : f.table.List()) CHECK(r.open_requests == 0);
  const std::string metrics = f.registry.Expose();
  CHECK(Has(metrics, "exaserve_gateway_resumes_total{cause=\"stream_error\"} 1"));
  CHECK(Has(metrics, "exaserve_gateway_resume_gap_seconds_count 1"));
  CHECK(Has(metrics, "exaserve_gateway_requests_total{outcome=\"ok\"} 1"));
}

TEST_CASE("Resumes stop at gateway.max_resumes; then the client gets the error") {
  GatewayOptions o;
  o.max_resumes = 1;
  Fixture f(o);
  f.Start();
  f.backend.Token(0, 17);
  f.backend.Finish(0, absl::UnavailableError("first"));
  REQUIRE(f.backend.submitted.size() == 2);
  f.backend.Token(1, 18);
  f.backend.Finish(1, absl::UnavailableError("second"));
  CHECK(f.backend.submitted.size() == 2);
  REQUIRE(f.events.size() == 3);
  CHECK(f.events[2].status.code() == absl::StatusCode::kUnavailable);
  CHECK(f.events[2].completion_tokens == 2);
  CHECK(f.frontend.in_flight() == 0);
  CHECK(Has(f.registry.Expose(), "exaserve_gateway_resume_failures_total{reason=\"attempts\"} 1"));
}

TEST_CASE("A stalled stream is resumed elsewhere and the stalled attempt cancelled") {
  GatewayOptions o;
  o.stream_stall_timeout = absl::Seconds(1);
  Fixture f(o);
  f.Start();
  const absl::Time t0 = absl::Now();
  f.backend.Token(0, 17);
  f.frontend.CheckStreams(t0 + absl::Milliseconds(500));
  CHECK(f.backend.submitted.size() == 1);
  f.frontend.CheckStreams(t0 + absl::Seconds(3));
  REQUIRE(f.backend.submitted.size() == 2);
  CHECK(f.backend.cancelled == std::vector<engine::RequestId>{1});
  f.backend.Token(0, 55);  // the stalled replica wakes up: ignored
  f.backend.Token(1, 18);
  f.backend.Finish(0, absl::CancelledError("cancelled"));  // ignored too
  f.backend.Finish(1, absl::OkStatus());
  REQUIRE(f.events.size() == 3);
  CHECK(f.events[1].token == 18);
  CHECK(f.events[2].status.ok());
  CHECK(Has(f.registry.Expose(), "exaserve_gateway_resumes_total{cause=\"stalled\"} 1"));
}

TEST_CASE("Streams on a suspected node move; with nowhere to go they stay") {
  Fixture f;
  auto call = f.Start();
  f.backend.Token(0, 17);
  const std::string first = f.backend.submitted[0].first;
  f.table.SetHealthy(first, false);
  f.frontend.CheckStreams(absl::Now());
  REQUIRE(f.backend.submitted.size() == 2);
  CHECK(call->replica_id() != first);
  CHECK(f.backend.cancelled.size() == 1);
  // Every other replica suspected too: the stream stays where it is rather than fail.
  for (const auto& r : f.table.List()) f.table.SetHealthy(r.info.id, false);
  f.frontend.CheckStreams(absl::Now());
  CHECK(f.backend.submitted.size() == 2);
  f.backend.Token(1, 18);
  f.backend.Finish(1, absl::OkStatus());
  REQUIRE(f.events.size() == 3);
  CHECK(f.events.back().status.ok());
}

TEST_CASE("A broken stream waits for a replica until gateway.resume_deadline") {
  GatewayOptions o;
  o.resume_deadline = absl::Seconds(2);
  Fixture f(o);
  f.Start();
  f.backend.Token(0, 17);
  for (const auto& r : f.table.List()) {
    if (r.info.id != f.backend.submitted[0].first) f.table.Report(r.info.id, {0, 0, false});
  }
  f.backend.Finish(0, absl::UnavailableError("node went away"));
  CHECK(f.backend.submitted.size() == 1);
  CHECK(f.events.size() == 1);  // paused, not failed
  f.frontend.CheckStreams(absl::Now());
  CHECK(f.events.size() == 1);
  f.table.Report("n3/m@v1#0", {0, 0, true});
  f.frontend.CheckStreams(absl::Now());
  REQUIRE(f.backend.submitted.size() == 2);
  CHECK(f.backend.submitted[1].first == "n3/m@v1#0");
  // Again, and this time nothing comes back within the deadline.
  f.table.Report("n3/m@v1#0", {0, 0, false});
  f.backend.Token(1, 18);
  f.backend.Finish(1, absl::UnavailableError("node went away again"));
  f.frontend.CheckStreams(absl::Now() + absl::Seconds(3));
  REQUIRE(f.events.size() == 3);
  CHECK(f.events[2].status.code() == absl::StatusCode::kUnavailable);
  CHECK(f.frontend.in_flight() == 0);
  CHECK(
      Has(f.registry.Expose(), "exaserve_gateway_resume_failures_total{reason=\"no_replica\"} 1"));
}

TEST_CASE("Past the reattempt budget a failed request waits for it instead of failing") {
  Fixture f;
  constexpr int kCalls = 17;  // the budget is 16 at this load
  for (int i = 0; i < kCalls; ++i) f.Start();
  for (int i = 0; i < kCalls; ++i) {
    f.backend.Finish(static_cast<size_t>(i), absl::UnavailableError("node went away"));
  }
  REQUIRE(f.backend.submitted.size() == kCalls + 16);
  CHECK(f.events.empty());  // the 17th waits: no error
  f.frontend.CheckStreams(absl::Now());
  CHECK(f.backend.submitted.size() == kCalls + 16);
  f.backend.Token(kCalls, 17);  // a retried request's first token frees a place
  f.frontend.CheckStreams(absl::Now());
  CHECK(f.backend.submitted.size() == kCalls + 17);
  CHECK(f.frontend.in_flight() == kCalls);
}

TEST_CASE("A client's seed is kept") {
  Fixture f;
  TextRequest r;
  r.prompt = "1+1=";
  r.max_tokens = 4;
  r.sampling.seed = 77;
  auto call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE(call.ok());
  CHECK((*call)->seed() == 77);
  CHECK(f.backend.submitted[0].second.sampling.seed == 77u);
}

TEST_CASE("At most two attempts, and no retry for errors that would fail again") {
  Fixture f;
  f.Start();
  f.backend.Finish(0, absl::UnavailableError("first"));
  REQUIRE(f.backend.submitted.size() == 2);
  f.backend.Finish(1, absl::UnavailableError("second"));
  CHECK(f.backend.submitted.size() == 2);
  REQUIRE(f.events.size() == 1);
  CHECK(f.events[0].status.message() == "second");

  f.events.clear();
  f.Start();
  f.backend.Finish(2, absl::InvalidArgumentError("prompt too long"));
  CHECK(f.backend.submitted.size() == 3);
  REQUIRE(f.events.size() == 1);
  CHECK(f.events[0].status.code() == absl::StatusCode::kInvalidArgument);
  for (const auto& r : f.table.List()) CHECK(r.open_requests == 0);
}

TEST_CASE("A cancelled request is not retried") {
  Fixture f;
  auto call = f.Start();
  call->Cancel();
  CHECK(f.backend.cancelled.size() == 1);
  f.backend.Finish(0, absl::UnavailableError("cancelled under us"));
  CHECK(f.backend.submitted.size() == 1);
  CHECK(f.frontend.in_flight() == 0);
  // Counted as cancelled (its client went away or gave up), not as an engine failure.
  const std::string metrics = f.registry.Expose();
  CHECK(metrics.find("exaserve_gateway_requests_total{outcome=\"cancelled\"} 1") !=
        std::string::npos);
  CHECK(metrics.find("outcome=\"engine_error\"") == std::string::npos);
}

TEST_CASE("Validation errors name the field as the caller sent it") {
  Fixture f;
  TextRequest r;
  r.prompt = "1+1=";
  r.max_tokens = 3000000000;  // past 32 bits: refused as sent, not wrapped
  r.max_tokens_field = "max_completion_tokens";
  auto call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(call.status().message() == "max_completion_tokens: 3000000000 is outside [1, 4096]");
  CHECK(ErrorField(call.status()) == "max_completion_tokens");
  r.max_tokens = 4;
  r.sampling.temperature = -1;
  call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(ErrorField(call.status()) == "temperature");
  CHECK(ErrorField(absl::InvalidArgumentError("temperature: no payload")).empty());
  // Stop strings: an empty one would end every completion at once; each is bounded.
  r.sampling.temperature = 0;
  for (const std::string& stop : {std::string(), std::string(257, 'x')}) {
    r.stop = {"\n", stop};
    call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
    REQUIRE_FALSE(call.ok());
    CHECK(ErrorField(call.status()) == "stop");
    CHECK(call.status().message() ==
          StrCat("stop: a stop string of ", stop.size(), " bytes; each must have 1 to 256"));
  }
}

TEST_CASE("A prompt that does not fit the context is refused with both numbers") {
  Fixture f;
  TextRequest r;
  r.prompt = "1+1=";
  r.max_tokens = 600;
  auto call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(call.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(call.status().message()).find("context length of 512") != std::string::npos);
}

TEST_CASE("A context overflow names the prompt when it leaves no room, else max_tokens") {
  Fixture f;
  TextRequest r;
  r.prompt_tokens.assign(600, 17);  // alone past the 512-token context
  r.max_tokens = 4;
  auto call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(ErrorField(call.status()) == "prompt");
  CHECK(ErrorCode(call.status()) == "context_length_exceeded");
  r.prompt_tokens.clear();
  r.prompt = std::string(600, '1');  // a chat prompt names its messages
  r.prompt_field = "messages";
  call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(ErrorField(call.status()) == "messages");
  r.prompt = "1+1=";
  r.max_tokens = 510;  // the prompt fits; the room asked for does not
  call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(ErrorField(call.status()) == "max_tokens");
  CHECK(ErrorCode(call.status()) == "context_length_exceeded");
}

TEST_CASE("A token id outside the vocabulary is refused naming prompt, before any replica") {
  Fixture f;
  TextRequest r;
  r.prompt_tokens = {1, 2, f.backend.tokenizer().vocab_size()};
  r.max_tokens = 4;
  auto call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(ErrorField(call.status()) == "prompt");
  CHECK(std::string(call.status().message()).find("at position 2") != std::string::npos);
  CHECK(f.backend.submitted.empty());
}

TEST_CASE("top_logprobs past the engine's 20 is refused naming it") {
  Fixture f;
  TextRequest r;
  r.prompt = "1+1=";
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 21;
  auto call = f.frontend.Start(r, [](const engine::StreamEvent&) {});
  REQUIRE_FALSE(call.ok());
  CHECK(ErrorField(call.status()) == "top_logprobs");
  r.sampling.top_logprobs = 20;
  REQUIRE(f.frontend.Start(r, [](const engine::StreamEvent&) {}).ok());
  CHECK(f.backend.submitted.back().second.sampling.top_logprobs == 20);
}

TEST_CASE("Models are found by NAME or NAME@VERSION; unknown ones are one metric label") {
  Fixture f;
  CHECK(f.frontend.FindModel("m").ok());
  CHECK(f.frontend.FindModel("m@v1").ok());
  CHECK(f.frontend.FindModel("").ok());  // the first served
  auto missing = f.frontend.FindModel("m@v9");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(ErrorField(missing.status()) == "model");
  CHECK(ErrorCode(missing.status()) == "model_not_found");
  CHECK(f.frontend.ModelLabel("m@v1") == "m");
  CHECK(f.frontend.ModelLabel("attacker-chosen-name") == "unknown");
}

TEST_CASE("The router's estimate of the first token is compared with the actual one") {
  Fixture f;
  // The fit needs 32 first tokens before it is reported against; the 40 here are all quick.
  for (size_t i = 0; i < 40; ++i) {
    auto call = f.Start();
    f.backend.Token(i, 17);
    f.backend.Finish(i, absl::OkStatus());
  }
  const std::string metrics = f.registry.Expose();
  CHECK(Has(metrics, "exaserve_gateway_ttft_estimate_ratio_count 8\n"));
  CHECK(Has(metrics, "exaserve_gateway_ttft_estimated_seconds_count 8\n"));
}

}  // namespace
}  // namespace exa::gateway

namespace exa::gateway {
namespace {

// Writes `text` to a fresh file under the temp directory and returns its path.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = StrCat(std::filesystem::temp_directory_path().string(), "/", name, "-",
                                  ::getpid(), "-", absl::ToUnixNanos(absl::Now()));
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("Rate limits refuse past the limit, refund unused max_tokens and reload on change") {
  GatewayOptions options;
  options.rate_limits_file =
      WriteTemp("limits", "default: {requests_per_minute: 2, tokens_per_minute: 1000}\n");
  Fixture f(options);
  REQUIRE(f.frontend.LoadApiKeys().ok());
  TextRequest r;
  r.prompt = "1+1=";
  r.max_tokens = 100;
  RateLimitReport report;
  auto sink = [&f](const engine::StreamEvent& e) { f.events.push_back(e); };
  auto call = f.frontend.Start(r, sink, &report);
  REQUIRE(call.ok());
  const int64_t prompt = (*call)->prompt_tokens();
  CHECK(report.remaining_tokens == 1000 - prompt - 100);
  CHECK(report.remaining_requests == 1);
  f.backend.Token(0, 17);
  f.backend.Finish(0, absl::OkStatus());  // one token of 100: 99 come back
  CHECK(f.frontend.RateLimitState("").remaining_tokens == 1000 - prompt - 1);
  REQUIRE(f.frontend.Start(r, sink, &report).ok());
  auto refused = f.frontend.Start(r, sink, &report);
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(report.refused == "requests");
  CHECK(report.retry_after > absl::ZeroDuration());
  const std::string metrics = f.registry.Expose();
  CHECK(
      Has(metrics, "exaserve_gateway_rate_limited_total{key=\"anonymous\",limit=\"requests\"} 1"));
  CHECK(Has(metrics, "exaserve_gateway_requests_total{outcome=\"rate_limited\"} 1"));

  // A bad rewrite keeps the old limits; a good one applies at the next tick.
  std::ofstream(options.rate_limits_file) << "default: {requests_per_minute: x}\n";
  f.frontend.Tick(absl::Now());
  CHECK_FALSE(f.frontend.Start(r, sink, &report).ok());
  CHECK(Has(f.registry.Expose(), "exaserve_gateway_rate_limit_reloads_total{outcome=\"error\"} 1"));
  std::ofstream(options.rate_limits_file) << "default: {requests_per_minute: 10}\n";
  f.frontend.Tick(absl::Now() + absl::Seconds(1));
  CHECK(f.frontend.Start(r, sink, &report).ok());
  CHECK(report.limit_requests == 10);
  CHECK_FALSE(report.tokens_limited);
  // Two gateways: each takes half.
  f.frontend.SetGatewayCount(2);
  CHECK(f.frontend.RateLimitState("").limit_requests == 5);
  std::filesystem::remove(options.rate_limits_file);
}

}  // namespace
}  // namespace exa::gateway
