// Weight distribution's settings (docs/architecture.md#flows), apart from the role that uses
// them (weights_role.h): the daemon's options (options.h) register them without depending on the
// role's implementation (docs/architecture.md#dependencies).
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "config/schema.h"

namespace exa::daemon {

// Weight distribution (docs/architecture.md#flows): see weights_role.h.
struct WeightsOptions {
  std::string origin_dir;  // --origin-dir: this storage node is the origin
  std::string origin;      // host:port of the origin's gRPC
  config::Bytes rack_cache_budget{500ull << 30};
  int parallel = 8;  // docs/architecture.md#weights: 8-12 streams is the sweet spot
  absl::Duration tier_timeout = absl::Seconds(60);
  int max_streams_total = 256;
  int max_streams_per_client = 64;  // a node pulling at --parallel 8 uses 8
  std::vector<std::string> prestage;
};

void RegisterWeightsConfig(config::Schema& schema, WeightsOptions* options);

}  // namespace exa::daemon
