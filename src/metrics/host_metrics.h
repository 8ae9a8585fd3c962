// Node-level host metrics the alert rules need beyond the process metrics
// (docs/architecture.md#monitoring-and-alerts, "network: cross-node bandwidth"): each network
// interface's byte counters and link speed, read from sysfs at exposition time.
//
//   exaserve_network_receive_bytes_total{device}   counter, statistics/rx_bytes
//   exaserve_network_transmit_bytes_total{device}  counter, statistics/tx_bytes
//   exaserve_network_speed_bytes{device}           gauge, link speed in bytes per second
//                                                  (speed in Mbit/s × 125000); absent when the
//                                                  kernel does not know it (virtual or down links)
//
// Loopback is left out: its traffic never crosses nodes.
//
// Thread safety: the functions may be called from any thread.
#pragma once

#include <string>
#include <vector>

#include "metrics/registry.h"

namespace exa::metrics {

struct NetworkInterface {
  std::string name;
  double receive_bytes = 0;
  double transmit_bytes = 0;
  double speed_bytes_per_second = 0;  // 0: unknown
};

// Every interface under `sys_class_net` but loopback, sorted by name; empty when unreadable.
std::vector<NetworkInterface> ReadNetworkInterfaces(const std::string& sys_class_net);

// Registers the three network families above, read from `sys_class_net` on each exposition.
void RegisterNetworkMetrics(Registry& registry,
                            const std::string& sys_class_net = "/sys/class/net");

}  // namespace exa::metrics
