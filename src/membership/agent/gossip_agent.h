// Runs the sans-IO SWIM core (membership/swim_core.h) on real sockets: UDP datagrams and TCP
// for the reliable channel (push-pull, fallback pings), all fed into the core on one strand,
// with a timer armed for the core's next deadline. Packets are sealed with the keyring when one
// is configured; packets that fail to open are dropped and counted.
//
// TCP frame: sender_address_length:u16 sender_address payload_length:u32 payload — the sender's
// advertised gossip address rides along because replies go there, not to the ephemeral port.
//
// Thread safety: Start/Leave/Stop from the owning thread; Members(), Subscribe() and the
// keyring calls from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "membership/agent/keyring.h"
#include "membership/config.h"
#include "membership/member.h"
#include "membership/swim_core.h"
#include "metrics/registry.h"
#include "net/io_runner.h"

namespace exa::membership {

struct GossipAgentOptions {
  std::string bind_address = "0.0.0.0";
  uint16_t port = 7946;           // 0 picks a free port (tests)
  std::string advertise_address;  // host part peers use; the port is the bound one
  std::vector<std::string> join;  // host:port seeds
  Config core;
  std::string cluster_name = "exaserve";  // additional authenticated data for sealed packets
};

class GossipAgent {
 public:
  GossipAgent(net::IoRunner& io, GossipAgentOptions options, std::shared_ptr<Keyring> keyring,
              metrics::Registry& registry);
  ~GossipAgent();
  GossipAgent(const GossipAgent&) = delete;
  GossipAgent& operator=(const GossipAgent&) = delete;

  // Binds UDP and TCP, builds the core for `self` (its address is filled in here) and joins the
  // seeds. Fails naming the port when it is taken.
  absl::Status Start(SwimCore::LocalNode self);
  uint16_t port() const { return port_; }
  // Announces a graceful leave and waits for it to spread, at most until `deadline`.
  void Leave(absl::Time deadline);
  // Changes this node's gossip metadata (a new incarnation spreads it), on the agent's strand;
  // `change` edits a copy of the current metadata. A change past the size limit is logged and
  // dropped.
  void UpdateMetadata(std::function<void(Metadata*)> change);
  void Stop();

  // A snapshot of the view, this node included.
  std::vector<Member> Members() const;
  int HealthScore() const;
  // Called on the agent's strand for each membership event; must not block.
  void Subscribe(std::function<void(const Event&)> callback);
  Keyring& keyring() { return *keyring_; }

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  std::shared_ptr<Keyring> keyring_;
  uint16_t port_ = 0;
};

}  // namespace exa::membership
