// ReplicaBackends for gateway tests, serving model "m" version "v1" (the bundled model's
// tokenizer, a 512-token context). FakeBackend holds each submitted request until the test
// delivers its events; AnsweringBackend answers each at once from a thread of its own. Neither
// calls back synchronously.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/tokenizer_detokenizer.h"
#include "gateway/frontend.h"

namespace exa::gateway {

class FakeBackend final : public ReplicaBackend {
 public:
  // With `chat_template`, the model renders chat prompts with it (bos_token "<s>").
  explicit FakeBackend(const std::string& chat_template = "") {
    auto tokenizer = engine::LoadDetokenizer(EXA_SOURCE_DIR "/models/exa-tiny-arith");
    REQUIRE(tokenizer.ok());
    model_ = {"m", "v1", *tokenizer, 512};
    if (chat_template.empty()) return;
    auto parsed = chat_template::ChatTemplate::FromTokenizerConfig(
        nlohmann::json({{"bos_token", "<s>"}, {"chat_template", chat_template}}).dump());
    REQUIRE(parsed.ok());
    auto plain = std::shared_ptr<const engine::Tokenizer>(*tokenizer, &(*tokenizer)->tokenizer());
    model_.tokenizer = std::make_shared<engine::TokenizerDetokenizer>(plain, *parsed);
  }
  std::vector<ModelView> Models() const override { return {model_}; }
  absl::StatusOr<engine::RequestId> Submit(const std::string& replica_id,
                                           engine::GenerateRequest request) override {
    submitted.push_back({replica_id, std::move(request)});
    return submitted.size();
  }
  void Cancel(const std::string& replica_id, engine::RequestId id) override {
    cancelled.push_back(id);
  }

  // A token of request `i` with text "x" (or `text`), and a log-probability and alternatives.
  void Token(size_t i, int32_t token, std::string text = "x", float logprob = 0,
             std::vector<std::pair<int32_t, float>> top = {}) {
    engine::StreamEvent e;
    e.token = token;
    e.text = std::move(text);
    e.logprob = logprob;
    e.top_logprobs = std::move(top);
    submitted.at(i).second.callback(e);
  }
  void Finish(size_t i, absl::Status status) {
    engine::StreamEvent e;
    e.finished = true;
    e.finish_reason = status.ok() ? engine::FinishReason::kStop : engine::FinishReason::kError;
    e.status = std::move(status);
    submitted.at(i).second.callback(e);
  }
  const engine::Tokenizer& tokenizer() const { return model_.tokenizer->tokenizer(); }

  std::vector<std::pair<std::string, engine::GenerateRequest>> submitted;
  std::vector<engine::RequestId> cancelled;

 private:
  ModelView model_;
};

// Answers every request with one token and a finish, from a thread of its own (never inside
// Submit, as a real replica would not).
class AnsweringBackend final : public ReplicaBackend {
 public:
  AnsweringBackend() {
    auto tokenizer = engine::LoadDetokenizer(EXA_SOURCE_DIR "/models/exa-tiny-arith");
    REQUIRE(tokenizer.ok());
    model_ = {"m", "v1", *tokenizer, 512};
  }
  ~AnsweringBackend() override {
    absl::MutexLock lock(&mu_);
    for (std::thread& t : threads_) t.join();
  }
  std::vector<ModelView> Models() const override { return {model_}; }
  absl::StatusOr<engine::RequestId> Submit(const std::string&,
                                           engine::GenerateRequest request) override {
    absl::MutexLock lock(&mu_);
    threads_.emplace_back([callback = request.callback] {
      engine::StreamEvent token;
      token.token = 17;
      token.text = "2";
      callback(token);
      engine::StreamEvent done;
      done.finished = true;
      done.finish_reason = engine::FinishReason::kStop;
      callback(done);
    });
    return threads_.size();
  }
  void Cancel(const std::string&, engine::RequestId) override {}

 private:
  ModelView model_;
  absl::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exa::gateway
