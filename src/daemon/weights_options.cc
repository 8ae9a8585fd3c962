#include "daemon/weights_options.h"

#include "common/host_port.h"
#include "common/status.h"
#include "common/strings.h"
#include "weights/manifest.h"

namespace exa::daemon {
namespace {

std::string ValidateModels(const std::vector<std::string>& models) {
  for (const std::string& m : models) {
    auto spec = weights::ParseModelSpec(m);
    if (!spec.ok()) return StrCat("\"", m, "\": ", ToStd(spec.status().message()));
  }
  return "";
}

std::string ValidateAddress(const std::string& a) { return a.empty() ? "" : HostPortError(a); }

}  // namespace

void RegisterWeightsConfig(config::Schema& s, WeightsOptions* o) {
  s.Add("weights.origin_dir", &o->origin_dir,
        "serve this directory as the origin (storage role); empty: not an origin");
  s.Add<std::string>("weights.origin", &o->origin,
                     "host:port (gRPC) of the origin: rack caches' upstream, nodes' last tier",
                     ValidateAddress);
  s.Add("weights.rack_cache_budget", &o->rack_cache_budget,
        "bytes a rack cache keeps before evicting least recently used chunks");
  s.Add<int>("weights.parallel", &o->parallel, "parallel chunk streams per pull",
             [](const int& v) { return v >= 1 && v <= 256 ? "" : StrCat(v, ": expected 1-256"); });
  s.Add("weights.tier_timeout", &o->tier_timeout,
        "one chunk from one tier may take this long before the next tier is tried",
        config::Validator<absl::Duration>(config::PositiveDuration));
  s.Add<int>("weights.max_streams_total", &o->max_streams_total,
             "chunk streams a storage node serves at once",
             [](const int& v) { return v >= 1 ? "" : StrCat(v, ": must be positive"); });
  s.Add<int>("weights.max_streams_per_client", &o->max_streams_per_client,
             "chunk streams one client host may hold at once",
             [](const int& v) { return v >= 1 ? "" : StrCat(v, ": must be positive"); });
  s.Add<std::vector<std::string>>("weights.prestage", &o->prestage,
                                  "models NAME[:VERSION] pulled into the node cache at start",
                                  ValidateModels);
}

}  // namespace exa::daemon
