// The simulators' network model (sim_network.h): one simulation thread.
#include "sim/sim_network.h"

namespace exa::sim {

std::optional<int> SimNetwork::NodeAt(const membership::Address& address) const {
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return std::nullopt;
  return it->second;
}

absl::Duration SimNetwork::Latency(Random& rng) const {
  return absl::Microseconds(link_.unit_us * (link_.base + link_.jitter * rng.UniformDouble()));
}

std::optional<absl::Duration> SimNetwork::Transit(membership::Channel channel, Random& rng) const {
  if (channel == membership::Channel::kDatagram && link_.loss > 0 && rng.Bernoulli(link_.loss)) {
    return std::nullopt;
  }
  absl::Duration delay = Latency(rng);
  if (channel == membership::Channel::kReliable) delay += link_.reliable_setup;
  return delay;
}

}  // namespace exa::sim
