#include "metrics/host_metrics.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace exa::metrics {
namespace {

namespace fs = std::filesystem;

// The first number in `path`, or `fallback` when the file is missing or unreadable (reading
// speed of a link that is down fails with EINVAL).
double ReadNumber(const fs::path& path, double fallback) {
  std::ifstream in(path);
  double v = 0;
  if (!(in >> v)) return fallback;
  return v;
}

// ARPHRD_LOOPBACK (linux/if_arp.h).
constexpr int kLoopbackType = 772;

}  // namespace

std::vector<NetworkInterface> ReadNetworkInterfaces(const std::string& sys_class_net) {
  std::vector<NetworkInterface> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(sys_class_net, ec)) {
    const fs::path dir = entry.path();
    NetworkInterface nic;
    nic.name = dir.filename().string();
    if (nic.name == "lo" || ReadNumber(dir / "type", 0) == kLoopbackType) continue;
    nic.receive_bytes = ReadNumber(dir / "statistics" / "rx_bytes", 0);
    nic.transmit_bytes = ReadNumber(dir / "statistics" / "tx_bytes", 0);
    const double mbits = ReadNumber(dir / "speed", -1);
    nic.speed_bytes_per_second = mbits > 0 ? mbits * 125000 : 0;  // Mbit/s → bytes/s
    out.push_back(std::move(nic));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

void RegisterNetworkMetrics(Registry& registry, const std::string& sys_class_net) {
  using Collected = Registry::Collected;
  auto collect = [sys_class_net](double NetworkInterface::*field, bool known_only) {
    return [sys_class_net, field, known_only] {
      std::vector<Collected> out;
      for (const NetworkInterface& nic : ReadNetworkInterfaces(sys_class_net)) {
        if (known_only && nic.*field <= 0) continue;
        out.push_back({{{"device", nic.name}}, nic.*field});
      }
      return out;
    };
  };
  registry.AddCollector("exaserve_network_receive_bytes_total",
                        "Bytes received by each network interface (loopback excluded).", "counter",
                        collect(&NetworkInterface::receive_bytes, false));
  registry.AddCollector("exaserve_network_transmit_bytes_total",
                        "Bytes sent by each network interface (loopback excluded).", "counter",
                        collect(&NetworkInterface::transmit_bytes, false));
  registry.AddCollector("exaserve_network_speed_bytes",
                        "Link speed of each network interface in bytes per second, where the "
                        "kernel knows it.",
                        "gauge", collect(&NetworkInterface::speed_bytes_per_second, true));
}

}  // namespace exa::metrics
