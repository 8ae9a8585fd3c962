// Scale from zero at the gateway (docs/architecture.md#autoscaling). A request for a model that
// an autoscaled deployment serves with minReplicas 0, while no replica of it is ready, is parked
// here instead of answered "model not found": the gateway reports the models it holds requests
// for to the scheduler (Scheduler.Routes, every 2 s and at once on a model's first parked
// request), the leader's autoscaler starts a replica, and the request resumes when the model is
// served. Bounded: at most `max_waiting` parked requests (beyond: refused at once), each for at
// most `timeout` (then refused); both refusals are 503 / UNAVAILABLE with Retry-After.
//
// Thread safety: every method may be called from any thread. `resume` and `refuse` run outside
// the lock; `served` and `gone` are called under it and must not call back into the Activator.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metrics/registry.h"

namespace exa::gateway {

struct ActivatorOptions {
  int max_waiting = 128;
  absl::Duration timeout = absl::Seconds(60);
};

class Activator {
 public:
  Activator(ActivatorOptions options, metrics::Registry& registry);

  // The models the spec store says may be at zero replicas (Scheduler.Routes' answer).
  void SetActivatable(std::set<std::string> models);
  // Whether a request naming `requested` ("NAME" or "NAME@VERSION") may wait for a replica.
  bool Activatable(std::string_view requested) const;

  // Parks a request for `requested`: `resume` runs once the model is served, `refuse` with
  // UNAVAILABLE past the timeout, and neither once `gone` says the client left (the place is
  // given back). UNAVAILABLE at once, naming the bound, when max_waiting are parked.
  struct Parked {
    std::function<void()> resume;
    std::function<void(const absl::Status&)> refuse;
    std::function<bool()> gone;
  };
  absl::Status Park(std::string_view requested, absl::Time now, Parked parked);
  // Counts demand for `requested` without parking (a call that is not held: one that raced the
  // removal of the model's last replica).
  void NoteDemand(std::string_view requested, absl::Time now);

  // Resumes the requests of models `served` says are served now, refuses those past their
  // deadline, drops those whose client left. The gateway's 100 ms tick.
  void Tick(absl::Time now, const std::function<bool(const std::string&)>& served);

  // Models with requests parked, or asked for within the last 5 s: what the gateway reports.
  std::vector<std::string> Waiting(absl::Time now) const;
  // True once after a model got demand it had not had: the gateway reports at once.
  bool TakeNewDemand();
  // Seconds a refused client should wait before retrying (the replica may be starting).
  int retry_after_s() const;

 private:
  struct Entry {
    std::string model;
    absl::Time deadline;
    Parked parked;
  };
  void Demand(const std::string& model, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ActivatorOptions options_;
  mutable absl::Mutex mu_;
  std::set<std::string> activatable_ ABSL_GUARDED_BY(mu_);
  std::vector<Entry> parked_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> asked_ ABSL_GUARDED_BY(mu_);  // model → last demand
  bool new_demand_ ABSL_GUARDED_BY(mu_) = false;
  metrics::Gauge& waiting_;
  metrics::Family<metrics::Counter>& outcomes_;  // outcome
};

}  // namespace exa::gateway
