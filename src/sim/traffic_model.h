// The request load of `exaserve-sim cluster --scenario diurnal` (docs/perf/autoscaling.md):
// arrivals on a day curve with a recorded trace's minute-scale burstiness and request lengths,
// routed over the ready replicas of one deployment and served by a model of a continuous-batching
// replica. Pure: a function of its options, the trace's shape and the calls made.
//
// Arrivals: rate(t) = peak_rps × day(t) × burst(t). day(t) is a cosine between 1/peak_to_trough
// at the start of each `day_s` (the trough, 04:00 say) and 1 halfway through. burst(t) is the
// trace's arrivals in minute m ÷ its mean per minute, the trace's minutes in recorded order,
// repeated. A Poisson process at that rate. Request lengths: the trace's (input, output) pairs in
// recorded order, repeated; the prompt cut so that prompt + output fit the context.
//
// A replica runs `slots` sequences at once. A request holds a slot for its prefill
// (prompt × prefill cost) and then its output tokens, each one decode step of a full batch at the
// request's context (engine/sim_cost_model.h); it takes the slot that frees first, so it waits
// only when every slot is busy. TTFT = that wait + the prefill. The gateway sends each request to
// the replica, of two ready ones drawn at random, whose first slot frees sooner (the random pair
// of docs/architecture.md#routing, on the replicas' state now rather than as last reported).
//
// A replica that stops serving (a scale-down) takes no more requests and finishes what it holds:
// a drain. One removed while it still holds requests (Forget) loses them; so does an arrival
// with no ready replica.
//
// Thread safety: none; one owner.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sim_cost_model.h"
#include "nlohmann/json.hpp"
#include "traces/trace.h"

namespace exa::sim {

// What the load takes from a recorded trace.
struct TrafficShape {
  std::vector<std::pair<int32_t, int32_t>> lengths;  // (input, output) in recorded order
  std::vector<double> burst;                         // per recorded minute, mean 1
};

// INVALID_ARGUMENT when the trace spans less than two minutes or has no request.
absl::StatusOr<TrafficShape> ShapeOfTrace(const traces::Trace& trace);

struct TrafficOptions {
  double day_s = 86400;
  double peak_to_trough = 5;
  double peak_rps = 1;  // arrivals a second at the day's peak, before burstiness
  int slots = 4;        // sequences a replica runs at once (spec.concurrency)
  int context = 4096;   // tokens a sequence may hold (spec.context)
  double ttft_target_s = 2;
  engine::SimCostModel cost;
  uint64_t seed = 1;
};

// What a replica's node agent reports of its load (Node.ListReplicas).
struct ReplicaLoad {
  int64_t pending_tokens = 0;  // prompt tokens not yet prefilled + output tokens not yet made
  int running = 0;
  int waiting = 0;
  double queue_s = 0;  // the longest wait for a slot among the requests it took since last asked
  double ttft_s = 0;   // the longest TTFT among the requests it took since last asked
};

class TrafficModel {
 public:
  TrafficModel(const TrafficOptions& options, TrafficShape shape);

  void SetPeakRate(double rps) { o_.peak_rps = rps; }
  // The arrival rate at `t` seconds into the run, before the Poisson draw.
  double Rate(double t) const;
  // Mean seconds of a slot one request holds: one replica serves slots ÷ this a second.
  double MeanSlotSeconds() const { return mean_slot_s_; }
  // Mean over requests of their pending tokens integrated over the time they hold a slot, in
  // token-seconds: by Little's law, a replica taking r requests a second reports r × this
  // pending tokens on average (waits aside).
  double MeanPendingTokenSeconds() const { return mean_pending_token_s_; }
  // The trace's busiest minute ÷ its mean minute (1 for a trace with no minutes).
  double BusiestMinute() const { return busiest_minute_; }

  // Arrivals in [t, t + dt), each routed over `serving` (replica handles, in any order).
  void Step(double t, double dt, std::span<const uint64_t> serving);
  // Replica `id`'s load at `t`, and forgets the requests it finished.
  ReplicaLoad Load(uint64_t id, double t);
  // Whether replica `id` holds no request at `t` (a draining one may go).
  bool Idle(uint64_t id, double t) const;
  // Replica `id` is gone: the requests it still held at `t` are lost.
  void Forget(uint64_t id, double t);

  // Totals, TTFT per minute against the target, and the per-minute series every `series_every`
  // minutes.
  nlohmann::json Figures(int series_every) const;
  // Forgets the totals, the histograms and the minutes so far (a warm-up's); the replicas keep
  // what they hold.
  void ResetFigures();
  int64_t lost() const { return lost_; }

 private:
  struct Held {
    double start;        // the slot taken
    double first_token;  // prefill done
    double end;
    int32_t prompt;
    int32_t output;
  };
  struct Replica {
    std::vector<double> free_at;  // per slot, a min-heap
    std::vector<Held> held;
    double queue_max = 0;
    double ttft_max = 0;
  };
  struct Minute {
    double rate = 0;  // arrivals a second, as drawn
    int64_t requests = 0;
    double p99_s = 0;
  };
  static constexpr int kBuckets = 480;  // TTFT histogram: 1 ms × 1.03^i

  Replica& At(uint64_t id);
  void Arrive(double at, std::span<const uint64_t> serving);
  void CloseMinute();

  TrafficOptions o_;
  TrafficShape shape_;
  std::mt19937_64 rng_;
  double mean_slot_s_ = 0;
  double mean_pending_token_s_ = 0;
  double busiest_minute_ = 1;
  double next_arrival_ = 0;
  size_t next_length_ = 0;
  std::unordered_map<uint64_t, Replica> replicas_;

  int64_t requests_ = 0;
  int64_t lost_ = 0;
  std::vector<int64_t> all_;     // histogram over the run
  std::vector<int64_t> minute_;  // this minute's
  int minute_index_ = 0;
  int64_t minute_requests_ = 0;
  std::vector<Minute> minutes_;
};

}  // namespace exa::sim
