// exaserve-sim: simulations of the real cores on virtual time (`exaserve-sim gossip ...`).
#include "sim/gossip_sim.h"

int main(int argc, char** argv) { return exa::sim::GossipSimMain(argc, argv); }
