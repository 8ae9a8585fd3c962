#include "raft_history/spec_client.h"

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace exa::raft_history {
namespace {

namespace pb = exaserve::v1;

std::string StatusText(const grpc::Status& s) {
  return absl::StrCat(static_cast<int>(s.error_code()), ": ", s.error_message().substr(0, 300));
}

}  // namespace

std::string SpecYaml(const std::string& key, const std::string& value) {
  return absl::StrCat(
      "apiVersion: exaserve.io/v1\n"
      "kind: InferenceReplica\n"
      "metadata: {name: ",
      key,
      "}\n"
      "spec:\n"
      "  model: llama-13b\n"
      "  replicas: 0\n"
      "  resources: {gpu: 1, memory: 53Gi}\n"
      "  context: 4096\n"
      "  concurrency: 4\n"
      "  labels: {",
      kValueLabel, ": ", value, "}\n");
}

absl::StatusOr<std::string> ValueOf(const std::string& yaml) {
  try {
    YAML::Node label = YAML::Load(yaml)["spec"]["labels"][kValueLabel];
    if (!label || !label.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat("stored spec has no label ", kValueLabel));
    }
    return label.Scalar();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("stored spec: ", e.what()));
  }
}

Outcome ClassifyWrite(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::OK:
      return Outcome::kOk;
    // Answered by the scheduler before it proposes anything (scheduler_service.cc's Apply and
    // DeleteSpec validate, plan and check the local record first; RESOURCE_EXHAUSTED is the store
    // refusing the write at once), or refused by gRPC before sending.
    case grpc::INVALID_ARGUMENT:
    case grpc::NOT_FOUND:
    case grpc::FAILED_PRECONDITION:
    case grpc::PERMISSION_DENIED:
    case grpc::UNAUTHENTICATED:
    case grpc::RESOURCE_EXHAUSTED:
    case grpc::UNIMPLEMENTED:
      return Outcome::kFail;
    // UNAVAILABLE covers both "refused" and "no outcome within 5 s, may still take effect" from
    // the store, and a connection lost mid-call; DEADLINE_EXCEEDED, UNKNOWN, CANCELLED: no answer.
    default:
      return Outcome::kUnknown;
  }
}

SpecClient::SpecClient(std::string address, absl::Duration deadline)
    : address_(std::move(address)), deadline_(deadline) {
  grpc::ChannelArguments args;
  // A restarted scheduler is called again within a second, not after gRPC's default backoff
  // (up to 120 s), which would starve it of clients for the rest of the run.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
  stub_ = pb::Scheduler::NewStub(channel_);
}

bool SpecClient::Connected() { return channel_->GetState(true) == GRPC_CHANNEL_READY; }

void SpecClient::Prepare(grpc::ClientContext& context) const {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(deadline_));
}

CallResult SpecClient::Put(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  Prepare(context);
  pb::ApplyRequest request;
  request.set_yaml(SpecYaml(key, value));
  request.set_source("exa-raft-history");
  pb::ApplyResponse response;
  grpc::Status s = stub_->Apply(&context, request, &response);
  CallResult r;
  r.outcome = ClassifyWrite(s);
  if (!s.ok()) r.error = StatusText(s);
  return r;
}

CallResult SpecClient::Delete(const std::string& key) {
  grpc::ClientContext context;
  Prepare(context);
  pb::DeleteSpecRequest request;
  request.set_name(key);
  pb::DeleteSpecResponse response;
  grpc::Status s = stub_->DeleteSpec(&context, request, &response);
  CallResult r;
  r.outcome = ClassifyWrite(s);
  if (!s.ok()) r.error = StatusText(s);
  return r;
}

CallResult SpecClient::Read(const std::string& key) {
  grpc::ClientContext context;
  Prepare(context);
  pb::GetSpecsRequest request;
  request.set_name(key);
  pb::GetSpecsResponse response;
  grpc::Status s = stub_->GetSpecs(&context, request, &response);
  CallResult r;
  if (s.error_code() == grpc::NOT_FOUND) {  // answered after the read index: absent
    r.outcome = Outcome::kOk;
    return r;
  }
  if (!s.ok() || response.specs_size() != 1) {
    r.outcome = Outcome::kFail;  // a read that failed observed nothing
    r.error = s.ok() ? absl::StrCat(response.specs_size(), " specs for one name") : StatusText(s);
    return r;
  }
  absl::StatusOr<std::string> value = ValueOf(response.specs(0).yaml());
  uint64_t version = 0;
  if (!value.ok() || !absl::SimpleAtoi(response.specs(0).version(), &version)) {
    // Not a failure of the store's consistency but of the tool's assumptions: say so loudly.
    r.outcome = Outcome::kFail;
    r.error = absl::StrCat("unreadable spec ", key, " version \"", response.specs(0).version(),
                           "\": ", value.status().message());
    return r;
  }
  r.outcome = Outcome::kOk;
  r.value = *value;
  r.version = version;
  return r;
}

absl::StatusOr<std::string> SpecClient::Leader(const std::string& key) {
  grpc::ClientContext context;
  Prepare(context);
  pb::DescribeRequest request;
  request.set_name(key);
  pb::DescribeResponse response;
  grpc::Status s = stub_->Describe(&context, request, &response);
  if (!s.ok()) return absl::UnavailableError(StatusText(s));
  nlohmann::json j = nlohmann::json::parse(response.json(), nullptr, false);
  if (!j.is_object() || !j.contains("reconciler") || !j["reconciler"].is_string()) {
    return absl::InternalError("describe: no \"reconciler\" string");
  }
  return j["reconciler"].get<std::string>();
}

}  // namespace exa::raft_history
