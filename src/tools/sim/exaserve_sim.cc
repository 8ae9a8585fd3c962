// exaserve-sim: simulations of the real cores on virtual time (`exaserve-sim gossip ...`,
// `exaserve-sim cluster ...`).
#include <cstring>

#include "sim/cluster_sim.h"
#include "sim/gossip_sim.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "cluster") == 0) return exa::sim::ClusterSimMain(argc, argv);
  return exa::sim::GossipSimMain(argc, argv);
}
