// What the OpenAI API's route handlers share (gateway/openai_api.h is the public face): a
// responder that stamps every response with its request id and counts it, and OpenAI-shaped
// error responses.
//
// Thread safety: ApiResponder may be used from any thread, as net::HttpResponder.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gateway/frontend.h"
#include "gateway/openai_request.h"
#include "net/http_server.h"

namespace exa::gateway {

// Wraps a route's responder: every response gets the `x-request-id` header (the caller's when it
// is a valid id, else a generated one; docs/reference/api.md#following-a-request) and is counted
// in exaserve_gateway_http_responses_total under the endpoint and the model label set so far.
class ApiResponder final : public net::HttpResponder {
 public:
  ApiResponder(std::shared_ptr<net::HttpResponder> inner, Frontend& frontend, std::string endpoint,
               const net::HttpRequest& request);

  // The id this response carries.
  const std::string& request_id() const { return request_id_; }
  // The caller's x-request-id as sent ("" when none), for the Frontend to check.
  const std::string& sent_request_id() const { return sent_request_id_; }
  // The model label the response is counted under (Frontend::ModelLabel); "unknown" until set.
  void SetModel(std::string label);

  void Respond(net::HttpResponse response) override;
  void StartStream(int status, std::string content_type,
                   std::vector<std::pair<std::string, std::string>> headers) override;
  bool Write(std::string data) override { return inner_->Write(std::move(data)); }
  void Finish() override { inner_->Finish(); }
  bool ClientGone() const override { return inner_->ClientGone(); }
  void OnClientGone(std::function<void()> callback) override {
    inner_->OnClientGone(std::move(callback));
  }

 private:
  void Count(int status);

  const std::shared_ptr<net::HttpResponder> inner_;
  Frontend& frontend_;
  const std::string endpoint_;
  const std::string sent_request_id_;
  const std::string request_id_;
  absl::Mutex mu_;
  std::string model_ ABSL_GUARDED_BY(mu_) = "unknown";
  bool counted_ ABSL_GUARDED_BY(mu_) = false;
};

// An ApiError as OpenAI's JSON error.
net::HttpResponse ErrorResponse(const ApiError& error);
// A Status as OpenAI's JSON error: its field (ErrorField) as `param`, its ErrorCode as `code`
// (invalid_api_key for UNAUTHENTICATED).
net::HttpResponse StatusResponse(const absl::Status& status);

// POST /tokenize and POST /detokenize (docs/reference/api.md#tokenize-and-detokenize).
void HandleTokenize(Frontend& frontend, const net::HttpRequest& request,
                    const std::shared_ptr<ApiResponder>& responder);
void HandleDetokenize(Frontend& frontend, const net::HttpRequest& request,
                      const std::shared_ptr<ApiResponder>& responder);

}  // namespace exa::gateway
