#include "sim/traffic_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace exa::sim {
namespace {

constexpr double kBucketGrowth = 1.03;

int Bucket(double seconds, int buckets) {
  const double ms = seconds * 1000;
  if (ms <= 1) return 0;
  const int i = static_cast<int>(std::ceil(std::log(ms) / std::log(kBucketGrowth)));
  return std::min(i, buckets - 1);
}

// The upper bound, in seconds, of the bucket holding quantile `q` of `hist`; 0 when empty.
double Quantile(const std::vector<int64_t>& hist, double q) {
  int64_t total = 0;
  for (int64_t n : hist) total += n;
  if (total == 0) return 0;
  const auto rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(total)));
  int64_t seen = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    seen += hist[i];
    if (seen >= rank) return std::pow(kBucketGrowth, static_cast<double>(i)) / 1000;
  }
  return std::pow(kBucketGrowth, static_cast<double>(hist.size() - 1)) / 1000;
}

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }

}  // namespace

absl::StatusOr<TrafficShape> ShapeOfTrace(const traces::Trace& trace) {
  if (trace.requests.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(trace.path, ": no requests"));
  }
  const int minutes = static_cast<int>(trace.duration_s / 60);
  if (minutes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(trace.path, ": spans ", trace.duration_s,
                     " s; the diurnal load takes its burstiness from at least two whole minutes"));
  }
  TrafficShape shape;
  shape.burst.assign(minutes, 0);
  int64_t counted = 0;
  for (const traces::TraceRequest& r : trace.requests) {
    shape.lengths.emplace_back(r.input_length, r.output_length);
    const int m = static_cast<int>(r.arrival_s / 60);
    if (m < minutes) {
      shape.burst[m]++;
      counted++;
    }
  }
  const double mean = static_cast<double>(counted) / minutes;
  for (double& b : shape.burst) b /= mean;
  return shape;
}

TrafficModel::TrafficModel(const TrafficOptions& options, TrafficShape shape)
    : o_(options), shape_(std::move(shape)), rng_(options.seed), all_(kBuckets), minute_(kBuckets) {
  const int context = std::max(2, o_.context);
  for (auto& [prompt, output] : shape_.lengths) {
    output = std::clamp(output, 1, context - 1);
    prompt = std::clamp(prompt, 1, context - output);
  }
  double slot_s = 0, token_s = 0;
  for (const auto& [prompt, output] : shape_.lengths) {
    const double step = absl::ToDoubleSeconds(
        o_.cost.StepTime(0, o_.slots, static_cast<int64_t>(o_.slots) * (prompt + output / 2)));
    const double prefill = prompt * o_.cost.prefill_per_token_us / 1e6;
    slot_s += prefill + output * step;
    // Load() reports the prompt falling linearly through the prefill, then the output through
    // the decode.
    token_s += prefill * (prompt / 2.0 + output) + output * (output * step) / 2;
  }
  const auto n = static_cast<double>(std::max<size_t>(1, shape_.lengths.size()));
  mean_slot_s_ = slot_s / n;
  mean_pending_token_s_ = token_s / n;
  for (double b : shape_.burst) busiest_minute_ = std::max(busiest_minute_, b);
}

double TrafficModel::Rate(double t) const {
  const double trough = 1 / std::max(1.0, o_.peak_to_trough);
  const double phase = 2 * std::numbers::pi * t / o_.day_s;
  const double day = trough + (1 - trough) * (1 - std::cos(phase)) / 2;
  const double burst =
      shape_.burst.empty() ? 1 : shape_.burst[static_cast<size_t>(t / 60) % shape_.burst.size()];
  return o_.peak_rps * day * burst;
}

void TrafficModel::Step(double t, double dt, std::span<const uint64_t> serving) {
  while (t >= 60.0 * (minute_index_ + 1)) CloseMinute();
  if (next_arrival_ < t) next_arrival_ = t;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  while (next_arrival_ < t + dt) {
    const double at = next_arrival_;
    const double rate = Rate(at);
    // A minute with no recorded arrivals has rate 0: the process resumes at the next second.
    next_arrival_ = rate > 0 ? at - std::log1p(-unit(rng_)) / rate : std::floor(at) + 1;
    if (rate > 0) Arrive(at, serving);
  }
}

TrafficModel::Replica& TrafficModel::At(uint64_t id) {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) {
    it = replicas_.emplace(id, Replica{}).first;
    it->second.free_at.assign(std::max(1, o_.slots), 0.0);
  }
  return it->second;
}

void TrafficModel::Arrive(double at, std::span<const uint64_t> serving) {
  const auto [prompt, output] = shape_.lengths[next_length_++ % shape_.lengths.size()];
  requests_++;
  minute_requests_++;
  if (serving.empty()) {
    lost_++;  // the gateway has no ready replica to send it to
    return;
  }
  // Two distinct replicas when there are two.
  const size_t n = serving.size();
  const size_t i = std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  size_t j = n < 2 ? i : std::uniform_int_distribution<size_t>(0, n - 2)(rng_);
  if (n >= 2 && j >= i) j++;
  Replica* r = &At(serving[i]);
  Replica* other = &At(serving[j]);
  if (other->free_at.front() < r->free_at.front()) r = other;

  const double prefill = prompt * o_.cost.prefill_per_token_us / 1e6;
  const double step = absl::ToDoubleSeconds(
      o_.cost.StepTime(0, o_.slots, static_cast<int64_t>(o_.slots) * (prompt + output / 2)));
  std::pop_heap(r->free_at.begin(), r->free_at.end(), std::greater<>());
  const double start = std::max(at, r->free_at.back());
  const double end = start + prefill + output * step;
  r->free_at.back() = end;
  std::push_heap(r->free_at.begin(), r->free_at.end(), std::greater<>());
  r->held.push_back({start, start + prefill, end, prompt, output});

  const double wait = start - at;
  const double ttft = wait + prefill;
  r->queue_max = std::max(r->queue_max, wait);
  r->ttft_max = std::max(r->ttft_max, ttft);
  const int b = Bucket(ttft, kBuckets);
  all_[b]++;
  minute_[b]++;
}

ReplicaLoad TrafficModel::Load(uint64_t id, double t) {
  Replica& r = At(id);
  std::erase_if(r.held, [t](const Held& h) { return h.end <= t; });
  ReplicaLoad load;
  double pending = 0;
  for (const Held& h : r.held) {
    if (t < h.start) {
      load.waiting++;
      pending += h.prompt + h.output;
      continue;
    }
    load.running++;
    if (t < h.first_token) {
      pending += h.prompt * (h.first_token - t) / (h.first_token - h.start) + h.output;
    } else {
      pending += h.output * (h.end - t) / (h.end - h.first_token);
    }
  }
  load.pending_tokens = static_cast<int64_t>(std::llround(pending));
  load.queue_s = r.queue_max;
  load.ttft_s = r.ttft_max;
  r.queue_max = 0;
  r.ttft_max = 0;
  return load;
}

bool TrafficModel::Idle(uint64_t id, double t) const {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return true;
  return *std::max_element(it->second.free_at.begin(), it->second.free_at.end()) <= t;
}

void TrafficModel::Forget(uint64_t id, double t) {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  for (const Held& h : it->second.held) lost_ += h.end > t;
  replicas_.erase(it);
}

void TrafficModel::ResetFigures() {
  requests_ = 0;
  lost_ = 0;
  std::fill(all_.begin(), all_.end(), 0);
  std::fill(minute_.begin(), minute_.end(), 0);
  minute_requests_ = 0;
  minutes_.clear();
}

void TrafficModel::CloseMinute() {
  minutes_.push_back(
      {static_cast<double>(minute_requests_) / 60, minute_requests_, Quantile(minute_, 0.99)});
  std::fill(minute_.begin(), minute_.end(), 0);
  minute_requests_ = 0;
  minute_index_++;
}

nlohmann::json TrafficModel::Figures(int series_every) const {
  int meeting = 0;
  double worst = 0;
  for (const Minute& m : minutes_) {
    meeting += m.p99_s <= o_.ttft_target_s;
    worst = std::max(worst, m.p99_s);
  }
  nlohmann::json series = nlohmann::json::array();
  for (size_t i = 0; i < minutes_.size(); i += std::max(1, series_every)) {
    series.push_back({{"minute", i},
                      {"arrivals_per_s", Round3(minutes_[i].rate)},
                      {"ttft_p99_s", Round3(minutes_[i].p99_s)}});
  }
  return {{"peak_arrivals_per_s_before_burstiness", Round3(o_.peak_rps)},
          {"peak_to_trough", o_.peak_to_trough},
          {"requests", requests_},
          {"lost", lost_},
          {"ttft_p50_s", Round3(Quantile(all_, 0.5))},
          {"ttft_p99_s", Round3(Quantile(all_, 0.99))},
          {"ttft_target_s", o_.ttft_target_s},
          {"minutes", minutes_.size()},
          {"minutes_meeting_target", meeting},
          {"fraction_of_minutes_meeting_target",
           minutes_.empty() ? 0.0 : Round3(static_cast<double>(meeting) / minutes_.size())},
          {"worst_minute_ttft_p99_s", Round3(worst)},
          {"mean_slot_s", Round3(mean_slot_s_)},
          {"mean_pending_token_s", Round3(mean_pending_token_s_)},
          {"busiest_minute", Round3(busiest_minute_)},
          {"series", series}};
}

}  // namespace exa::sim
