#include "daemon/weights_role.h"

#include <filesystem>

#include "absl/time/clock.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "weights/fetcher.h"
#include "weights/layout.h"
#include "weights/rack_cache.h"
#include "weights/sha256.h"
#include "weights/source.h"
#include "weights/tier.h"
#include "weights/weights_service.h"

namespace exa::daemon {
std::string FindRackPeer(const std::vector<membership::Member>& members, const std::string& self_id,
                         const std::string& rack,
                         const std::function<bool(const membership::Member&)>& is_storage) {
  const membership::Member* best = nullptr;
  for (const membership::Member& m : members) {
    if (m.id == self_id || m.state != membership::MemberState::kAlive || m.metadata.rack != rack ||
        m.metadata.grpc_port == 0 || !is_storage(m)) {
      continue;
    }
    if (best == nullptr || m.id < best->id) best = &m;
  }
  if (best == nullptr) return "";
  return StrCat(membership::AddressHost(best->address), ":", best->metadata.grpc_port);
}

WeightsRole::WeightsRole(const DaemonOptions& options, metrics::Registry& registry)
    : options_(options), registry_(registry) {}

WeightsRole::~WeightsRole() { Stop(); }

absl::Status WeightsRole::Start(bool storage) {
  const WeightsOptions& w = options_.weights;
  weights::ServiceOptions service_options{.max_streams_total = w.max_streams_total,
                                          .max_streams_per_client = w.max_streams_per_client};
  if (!storage) return absl::OkStatus();
  if (!w.origin_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(w.origin_dir, ec)) {
      return absl::InvalidArgumentError(StrCat("--origin-dir ", w.origin_dir, ": not a directory"));
    }
    origin_source_ = std::make_unique<weights::DirectorySource>(w.origin_dir);
    service_ = std::make_unique<weights::WeightsService>(*origin_source_, service_options,
                                                         registry_, "origin");
    EXA_LOG_INFO("weights", "serving the origin", {{"origin_dir", w.origin_dir}});
    return absl::OkStatus();
  }
  if (w.origin.empty()) {
    EXA_LOG_INFO("weights",
                 "storage role without --origin-dir or weights.origin: no Weights service");
    return absl::OkStatus();
  }
  upstream_ = weights::MakeGrpcTier("origin", w.origin);
  weights::RackCacheOptions cache_options;
  cache_options.root = options_.node.cache_dir + "/rack";
  cache_options.budget_bytes = w.rack_cache_budget.value;
  rack_cache_ = std::make_unique<weights::RackCache>(cache_options, *upstream_, registry_);
  EXA_RETURN_IF_ERROR(rack_cache_->Start());
  service_ = std::make_unique<weights::WeightsService>(*rack_cache_, service_options, registry_,
                                                       "rack-cache");
  EXA_LOG_INFO("weights", "serving the rack cache",
               {{"root", cache_options.root}, {"upstream", w.origin}});
  return absl::OkStatus();
}

grpc::Service* WeightsRole::service() { return service_.get(); }

void WeightsRole::StartPrestage(std::function<std::string()> rack_peer) {
  if (options_.weights.prestage.empty()) return;
  fetch_metrics_ = std::make_unique<weights::FetchMetrics>(registry_);
  prestage_ = std::thread([this, rack_peer = std::move(rack_peer)] { Prestage(rack_peer); });
}

std::vector<std::unique_ptr<weights::Tier>> WeightsRole::PullTiers(
    const std::function<std::string()>& rack_peer, absl::Duration wait, std::string* peer_out) {
  const WeightsOptions& w = options_.weights;
  std::vector<std::unique_ptr<weights::Tier>> tiers;
  weights::GrpcTierOptions grpc{.connections = w.parallel};
  // Right after start the membership view may not yet hold the rack's peer: give gossip a
  // moment (bounded) before settling for the origin alone.
  std::string peer = rack_peer();
  for (absl::Time deadline = absl::Now() + wait;
       peer.empty() && !options_.network.join.empty() && !stopping_ && absl::Now() < deadline;
       peer = rack_peer()) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!peer.empty()) tiers.push_back(weights::MakeGrpcTier("rack-cache", peer, grpc));
  if (!w.origin.empty()) tiers.push_back(weights::MakeGrpcTier("origin", w.origin, grpc));
  if (peer_out != nullptr) *peer_out = peer;
  return tiers;
}

absl::StatusOr<WeightsRole::ModelFile> WeightsRole::ReadModelFile(
    const std::string& name, const std::string& version, const std::string& path,
    uint64_t max_bytes, const std::function<std::string()>& rack_peer) {
  auto tiers = PullTiers(rack_peer, absl::Seconds(2), nullptr);
  if (tiers.empty()) {
    return absl::NotFoundError(
        StrCat("no weights source is configured (weights.origin, or a "
               "storage node in rack ",
               options_.node.rack, ")"));
  }
  const absl::Duration timeout = absl::Seconds(10);
  std::string errors;
  for (const auto& tier : tiers) {
    absl::StatusOr<weights::Manifest> manifest = tier->GetManifest(name, version, timeout);
    if (!manifest.ok()) {
      StrAppend(&errors, errors.empty() ? "" : "; ", tier->name(), ": ",
                manifest.status().message());
      continue;
    }
    const weights::FileEntry* file = manifest->FindFile(path);
    if (file == nullptr) {
      return absl::NotFoundError(StrCat(name, "@", version, " has no ", path));
    }
    if (file->size_bytes > max_bytes) {
      return absl::FailedPreconditionError(StrCat(name, "@", version, " ", path, " is ",
                                                  file->size_bytes, " bytes; at most ", max_bytes));
    }
    ModelFile out;
    for (const weights::FileEntry& f : manifest->files) {
      if (f.path.size() > 12 && f.path.ends_with(".safetensors"))
        out.checkpoint_bytes += f.size_bytes;
    }
    bool ok = true;
    for (uint32_t i = 0; i < file->chunks.size() && ok; ++i) {
      const weights::ChunkRef& chunk = file->chunks[i];
      std::string bytes;
      absl::Status s = tier->FetchChunk(
          weights::ChunkKey{manifest->name, manifest->version, path, i}, 0, chunk.size_bytes,
          timeout, [&](uint64_t, absl::Span<const std::string_view> pieces) {
            for (std::string_view p : pieces) bytes.append(p);
            return absl::OkStatus();
          });
      if (!s.ok() || weights::Sha256Hex(bytes) != chunk.sha256) {
        StrAppend(&errors, errors.empty() ? "" : "; ", tier->name(), ": ", path, " chunk ", i,
                  s.ok() ? std::string(" failed its sha256") : std::string(s.message()));
        ok = false;
        break;
      }
      out.text += bytes;
    }
    if (ok) return out;
  }
  return absl::NotFoundError(StrCat(name, "@", version, ": ", errors));
}

absl::StatusOr<std::string> WeightsRole::PullModel(const std::string& name,
                                                   const std::string& version,
                                                   const std::function<std::string()>& rack_peer) {
  const WeightsOptions& w = options_.weights;
  std::string peer;
  auto tiers = PullTiers(rack_peer, absl::Seconds(5), &peer);
  std::vector<weights::Tier*> order;
  for (auto& t : tiers) order.push_back(t.get());
  if (order.empty() &&
      !std::filesystem::exists(weights::ModelDir(options_.node.cache_dir, name, version))) {
    return absl::FailedPreconditionError(
        StrCat("model ", name, "@", version,
               " is not in the node cache and no weights source is "
               "configured (weights.origin, or a storage node in rack ",
               options_.node.rack, ")"));
  }
  weights::FetchOptions fetch;
  fetch.cache_dir = options_.node.cache_dir;
  fetch.parallel = w.parallel;
  fetch.tier_timeout = w.tier_timeout;
  fetch.cancelled = [this] { return stopping_.load(); };
  weights::Fetcher fetcher(order, fetch, fetch_metrics_.get());
  EXA_ASSIGN_OR_RETURN(weights::PullResult result, fetcher.Pull(name, version));
  EXA_LOG_INFO("weights", "pulled for a replica",
               {{"model", StrCat(result.manifest.name, "@", result.manifest.version)},
                {"rack_peer", peer.empty() ? std::string("none") : peer},
                {"bytes", static_cast<int64_t>(result.manifest.TotalBytes())},
                {"local_bytes", static_cast<int64_t>(result.local_bytes)},
                {"seconds", absl::ToDoubleSeconds(result.elapsed)}});
  return weights::ModelDir(options_.node.cache_dir, result.manifest.name, result.manifest.version)
      .string();
}

void WeightsRole::Prestage(const std::function<std::string()>& rack_peer) {
  const WeightsOptions& w = options_.weights;
  std::string peer;
  auto tiers = PullTiers(rack_peer, absl::Seconds(5), &peer);
  EXA_LOG_INFO("weights", "pre-staging",
               {{"models", static_cast<int64_t>(w.prestage.size())},
                {"rack_peer", peer.empty() ? std::string("none") : peer},
                {"origin", w.origin.empty() ? std::string("none") : w.origin}});
  std::vector<weights::Tier*> order;
  for (auto& t : tiers) order.push_back(t.get());
  weights::FetchOptions fetch;
  fetch.cache_dir = options_.node.cache_dir;
  fetch.parallel = w.parallel;
  fetch.tier_timeout = w.tier_timeout;
  fetch.cancelled = [this] { return stopping_.load(); };
  weights::Fetcher fetcher(order, fetch, fetch_metrics_.get());
  for (const std::string& model : w.prestage) {
    if (stopping_) return;
    auto spec = weights::ParseModelSpec(model);  // validated with the config
    auto result = fetcher.Pull(spec->name, spec->version);
    if (!result.ok()) {
      EXA_LOG_ERROR("weights", "pre-staging failed",
                    {{"model", model}, {"error", std::string(result.status().message())}});
      continue;
    }
    EXA_LOG_INFO("weights", "pre-staged",
                 {{"model", StrCat(result->manifest.name, "@", result->manifest.version)},
                  {"bytes", static_cast<int64_t>(result->manifest.TotalBytes())},
                  {"local_bytes", static_cast<int64_t>(result->local_bytes)},
                  {"seconds", absl::ToDoubleSeconds(result->elapsed)}});
  }
}

void WeightsRole::Stop() {
  stopping_ = true;
  if (prestage_.joinable()) prestage_.join();
}

}  // namespace exa::daemon
