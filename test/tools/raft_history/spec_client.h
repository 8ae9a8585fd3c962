// One scheduler's spec store as a register per key, over exaserve.v1.Scheduler
// (docs/architecture.md#consistency): a put is Apply of an InferenceReplica spec named after the
// key whose label jepsen-value carries the value; a delete is DeleteSpec; a read is GetSpecs of
// that name (a linearizable read: the scheduler waits for a read index first).
//
// Outcomes are mapped soundly: ok; fail only for codes the scheduler answers before it proposes
// anything (bad input, an unknown model, a delete of a spec it does not hold, a refusal at once);
// everything else — UNAVAILABLE (a forward that timed out, a leader lost), DEADLINE_EXCEEDED, a
// lost connection — is unknown: the write may still take effect.
//
// Thread safety: a SpecClient may be shared between threads (gRPC stubs are thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exaserve/v1/scheduler.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "raft_history/history.h"

namespace exa::raft_history {

// The label that carries a put's value.
inline constexpr char kValueLabel[] = "jepsen-value";

struct CallResult {
  Outcome outcome = Outcome::kUnknown;
  std::optional<std::string> value;  // a read: the value (nullopt: absent)
  uint64_t version = 0;              // a read of a present key: its version
  std::string error;                 // "CODE: message" when not ok
};

// A spec for `key` holding `value`: the preset llama-13b model with 0 replicas, so the store
// accepts it without a weights store and the reconciler starts nothing for it.
std::string SpecYaml(const std::string& key, const std::string& value);

// The value a stored spec's canonical YAML carries, or why not.
absl::StatusOr<std::string> ValueOf(const std::string& yaml);

// The mapping for writes: which gRPC codes mean "definitely not applied".
Outcome ClassifyWrite(const grpc::Status& status);

class SpecClient {
 public:
  SpecClient(std::string address, absl::Duration deadline);

  const std::string& address() const { return address_; }
  // Whether the channel is connected now (asks it to connect when idle). Only a hint for where
  // to send the next call: a call on any channel still gets a sound outcome.
  bool Connected();

  CallResult Put(const std::string& key, const std::string& value);
  CallResult Delete(const std::string& key);
  CallResult Read(const std::string& key);
  // The Raft leader's node id as this scheduler names it (Describe's "reconciler"); needs a
  // spec named `key` to exist.
  absl::StatusOr<std::string> Leader(const std::string& key);

 private:
  void Prepare(grpc::ClientContext& context) const;

  std::string address_;
  absl::Duration deadline_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<exaserve::v1::Scheduler::Stub> stub_;
};

}  // namespace exa::raft_history
