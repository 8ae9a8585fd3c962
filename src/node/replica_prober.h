// Drives ReplicaHealth for every local replica: process checks from the engines' step counters,
// model probes submitted to each engine, results collected after the probe timeout. Reports
// each change of health so the gateway can take a replica out of routing (and put it back).
//
// Thread safety: every public method may be called from any thread (the daemon's process and
// model timers fire on different I/O threads); `states_mu_` serializes them. Probe callbacks run
// on engine threads and only touch their own probe, under its `mu`.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "metrics/registry.h"
#include "node/replica_health.h"
#include "node/replica_host.h"

namespace exa::node {

class ReplicaProber {
 public:
  using OnChange =
      std::function<void(const std::string& replica_id, bool healthy, const std::string& reason)>;

  ReplicaProber(const ReplicaHost& host, HealthOptions options, metrics::Registry& registry,
                OnChange on_change);

  void CheckProcesses();
  // Submits one probe per replica; CollectProbes after probe_timeout reads the answers.
  void SendProbes();
  void CollectProbes();

  bool Healthy(const std::string& replica_id) const;
  const HealthOptions& options() const { return options_; }

 private:
  // One probe request; its fields are written on engine threads.
  struct Probe {
    absl::Mutex mu;
    std::string text ABSL_GUARDED_BY(mu);
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool ok ABSL_GUARDED_BY(mu) = false;
    engine::RequestId id ABSL_GUARDED_BY(mu) = 0;
    bool submitted ABSL_GUARDED_BY(mu) = false;
  };
  struct State {
    explicit State(const HealthOptions& o) : health(o) {}
    ReplicaHealth health;
    bool reported_healthy = true;
    std::shared_ptr<Probe> probe;
  };
  void Report(const Replica& replica, State& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(states_mu_);
  // The replica's health state, created healthy the first time a check sees it (replicas start
  // and stop at any time).
  State& StateFor(const Replica& replica) ABSL_EXCLUSIVE_LOCKS_REQUIRED(states_mu_);

  const ReplicaHost& host_;
  const HealthOptions options_;
  OnChange on_change_;
  mutable absl::Mutex states_mu_;
  std::map<std::string, State> states_ ABSL_GUARDED_BY(states_mu_);
  metrics::Family<metrics::Gauge>& healthy_gauge_;
  metrics::Family<metrics::Counter>& probes_;
};

}  // namespace exa::node
