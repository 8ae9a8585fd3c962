#include "tools/model_commands.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/time/clock.h"
#include "common/host_port.h"
#include "common/strings.h"
#include "common/units.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "net/tls.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"
#include "weights/fetcher.h"
#include "weights/layout.h"
#include "weights/model_cache.h"
#include "weights/publish.h"
#include "weights/rack_peer.h"
#include "weights/tier.h"

namespace exa::tools {
namespace {

namespace w = exa::weights;

// Errors read "exaserve-cli model: ...".
constexpr std::string_view kCommand = "model";

int ModelUsage(std::string_view message) { return Usage(message, kCommand); }

int ModelFailure(const absl::Status& s) {
  if (absl::IsInvalidArgument(s)) return ModelUsage(ToStd(s.message()));
  return Failure(ToStd(s.message()), kCommand);
}

std::string DefaultCacheDir() {
  if (const char* env = std::getenv("EXASERVE_CACHE_DIR")) return env;
  const char* home = std::getenv("HOME");
  std::string data = geteuid() == 0 || home == nullptr ? "/var/lib/exaserve"
                                                       : StrCat(home, "/.local/state/exaserve");
  return data + "/cache";
}

std::string CacheDir(const ModelCommandOptions& o) {
  return o.cache_dir.empty() ? DefaultCacheDir() : o.cache_dir;
}

void Print(const nlohmann::json& j) {
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n"
            << std::flush;
}

// "[#######.....] 1.20Gi / 2.00Gi  850.00Mi/s  ETA 1s" redrawn in place on a terminal.
void DrawBar(const w::PullProgress& p) {
  constexpr int kWidth = 30;
  double fraction = p.total_bytes == 0 ? 1.0 : double(p.done_bytes) / double(p.total_bytes);
  int filled = static_cast<int>(fraction * kWidth);
  double seconds = std::max(1e-3, absl::ToDoubleSeconds(p.elapsed));
  double rate = double(p.done_bytes - p.local_bytes) / seconds;
  std::string eta = rate > 0 ? DurationToString(absl::Seconds(static_cast<int64_t>(
                                   double(p.total_bytes - p.done_bytes) / rate)))
                             : "?";
  std::fprintf(stderr, "\r[%s%s] %s / %s  %s/s  ETA %s   ", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), BytesToString(p.done_bytes).c_str(),
               BytesToString(p.total_bytes).c_str(),
               BytesToString(static_cast<uint64_t>(rate)).c_str(), eta.c_str());
  if (p.finished) std::fprintf(stderr, "\n");
}

// The storage peer of the rack of the node at --addr, through that node's membership view
// (docs/architecture.md#weights: a node finds its rack's storage peer through membership). An error
// says why there is none; the caller then goes to the origin.
absl::StatusOr<w::RackPeerChoice> DiscoverRackPeer(const ClusterAccess& cluster) {
  auto stub = exaserve::v1::Admin::NewStub(net::NewChannel(cluster.addr));
  exaserve::v1::StatusResponse status;
  grpc::Status s = stub->Status(MakeContext(cluster).get(), {}, &status);
  if (!s.ok()) {
    return absl::UnavailableError(StrCat("cannot ask the node at --addr ", cluster.addr,
                                         " for its rack: ", s.error_message()));
  }
  exaserve::v1::MembersResponse members;
  s = stub->Members(MakeContext(cluster).get(), {}, &members);
  if (!s.ok()) {
    return absl::UnavailableError(StrCat("cannot ask the node at --addr ", cluster.addr,
                                         " for its members: ", s.error_message()));
  }
  std::vector<w::MemberView> view;
  for (const auto& m : members.members()) {
    view.push_back(
        {m.node_id(), m.state(), {m.roles().begin(), m.roles().end()}, m.rack(), m.grpc_address()});
  }
  w::RackPeerChoice choice = w::PickRackPeer(view, status.rack());
  if (choice.grpc_address.empty()) {
    return absl::NotFoundError(StrCat(choice.reason, ", as node ", status.node_id(), " at ",
                                      cluster.addr, " sees the cluster"));
  }
  choice.reason = StrCat("storage node ", choice.node_id, " of rack \"", status.rack(),
                         "\", found through ", cluster.addr);
  return choice;
}

// The tiers --source selects, in fetch order: the rack's storage peer, then the origin. The
// peer is --rack-cache, else $EXASERVE_RACK_CACHE, else found through the node at --addr.
absl::StatusOr<std::vector<std::unique_ptr<w::Tier>>> Tiers(const ModelCommandOptions& o,
                                                            const ClusterAccess& cluster) {
  std::vector<std::unique_ptr<w::Tier>> tiers;
  w::GrpcTierOptions grpc{.connections = std::max(1, o.parallel)};
  auto from_env = [](const std::string& flag, const char* env) {
    const char* v = std::getenv(env);
    return !flag.empty() || v == nullptr ? flag : std::string(v);
  };
  std::string rack_cache = from_env(o.rack_cache, "EXASERVE_RACK_CACHE");
  const std::string origin = from_env(o.origin, "EXASERVE_WEIGHTS_ORIGIN");
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"--rack-cache", rack_cache},
        {"--origin", origin}}) {
    if (std::string error = value.empty() ? "" : HostPortError(value); !error.empty()) {
      return absl::InvalidArgumentError(StrCat(flag, " ", error));
    }
  }
  bool want_rack = o.source == "auto" || o.source == "rack-cache";
  bool want_origin = o.source == "auto" || o.source == "origin";
  if (want_rack && rack_cache.empty() && !cluster.addr.empty()) {
    auto found = DiscoverRackPeer(cluster);
    if (found.ok()) {
      std::fprintf(stderr, "exaserve-cli model: rack cache peer %s (%s)\n",
                   found->grpc_address.c_str(), found->reason.c_str());
      rack_cache = found->grpc_address;
    } else if (o.source == "rack-cache") {
      return absl::UnavailableError(
          StrCat("--source rack-cache without --rack-cache: ", ToStd(found.status().message())));
    } else {
      std::fprintf(stderr, "exaserve-cli model: no rack cache peer: %s; %s\n",
                   std::string(found.status().message()).c_str(),
                   origin.empty() ? "and no --origin" : "fetching from the origin");
    }
  }
  if (want_rack && !rack_cache.empty()) {
    tiers.push_back(w::MakeGrpcTier("rack-cache", rack_cache, grpc));
  }
  if (want_origin && !origin.empty()) tiers.push_back(w::MakeGrpcTier("origin", origin, grpc));
  if (tiers.empty()) {
    return absl::InvalidArgumentError(
        StrCat("--source ", o.source, ": give ",
               o.source == "rack-cache" ? "--rack-cache HOST:PORT"
               : o.source == "origin"   ? "--origin HOST:PORT"
                                        : "--rack-cache HOST:PORT and/or --origin HOST:PORT"));
  }
  return tiers;
}

// Usage for bad flags, 1 when the rack's peer was required and none was found.
int TierFailure(const absl::Status& s) {
  return absl::IsInvalidArgument(s) ? ModelUsage(ToStd(s.message())) : ModelFailure(s);
}

// Manifest requests get --timeout (a silent tier is given up on after it, not after the fetcher's
// default); chunk streams get --tier-timeout.
int PullOne(const ModelCommandOptions& o, const std::string& cache_dir, const w::ModelSpec& spec,
            const std::vector<w::Tier*>& tiers, bool json, absl::Duration call_timeout) {
  auto timeout = ParseDuration(o.tier_timeout);
  if (!timeout.ok())
    return ModelUsage(StrCat("--tier-timeout ", ToStd(timeout.status().message())));
  if (*timeout <= absl::ZeroDuration()) {
    return ModelUsage(StrCat("--tier-timeout ", o.tier_timeout, ": must be positive"));
  }
  w::FetchOptions options;
  options.cache_dir = cache_dir;
  options.parallel = o.parallel;
  options.tier_timeout = *timeout;
  options.manifest_timeout = call_timeout;
  w::Fetcher fetcher(tiers, options);
  const bool bar = !json && ::isatty(STDERR_FILENO);
  auto result = fetcher.Pull(spec.name, spec.version, [&](const w::PullProgress& p) {
    if (json) {
      Print({{"event", "progress"},
             {"model", spec.name},
             {"total_bytes", p.total_bytes},
             {"done_bytes", p.done_bytes},
             {"local_bytes", p.local_bytes},
             {"elapsed_seconds", absl::ToDoubleSeconds(p.elapsed)}});
    } else if (bar) {
      DrawBar(p);
    }
  });
  if (!result.ok()) {
    if (json)
      Print({{"event", "error"},
             {"model", spec.name},
             {"error", std::string(result.status().message())}});
    return ModelFailure(result.status());
  }
  const w::Manifest& m = result->manifest;
  double seconds = absl::ToDoubleSeconds(result->elapsed);
  uint64_t fetched = m.TotalBytes() - result->local_bytes;
  if (json) {
    Print({{"event", "done"},
           {"model", m.name},
           {"version", m.version},
           {"digest", w::ManifestDigest(m)},
           {"total_bytes", m.TotalBytes()},
           {"local_bytes", result->local_bytes},
           {"bytes_by_tier", result->bytes_by_tier},
           {"corrupt_chunks", result->corrupt_chunks},
           {"tier_failures", result->tier_failures},
           {"elapsed_seconds", seconds},
           {"path", w::ModelDir(cache_dir, m.name, m.version).string()}});
  } else {
    std::printf(
        "%s@%s  %s verified in %s (%s local, %s/s)%s\n", m.name.c_str(), m.version.c_str(),
        BytesToString(m.TotalBytes()).c_str(), fmt::format("{:.2f}s", seconds).c_str(),
        BytesToString(result->local_bytes).c_str(),
        BytesToString(static_cast<uint64_t>(double(fetched) / std::max(seconds, 1e-3))).c_str(),
        result->corrupt_chunks > 0
            ? StrCat(", ", result->corrupt_chunks, " corrupt chunks refetched").c_str()
            : "");
  }
  return 0;
}

int RunPull(const ModelCommandOptions& o, bool json, const ClusterAccess& cluster) {
  auto spec = w::ParseModelSpec(o.model);
  if (!spec.ok()) return ModelUsage(StrCat("--model ", ToStd(spec.status().message())));
  auto tiers = Tiers(o, cluster);
  if (!tiers.ok()) return TierFailure(tiers.status());
  std::vector<w::Tier*> order;
  for (auto& t : *tiers) order.push_back(t.get());
  return PullOne(o, CacheDir(o), *spec, order, json, cluster.timeout);
}

// Every model the source lists (or --model) into the target cache.
int RunSync(const ModelCommandOptions& o, bool json, const ClusterAccess& cluster) {
  std::string target = o.target == "local-nvme" ? CacheDir(o) : o.target;
  auto tiers = Tiers(o, cluster);
  if (!tiers.ok()) return TierFailure(tiers.status());
  std::vector<w::Tier*> order;
  for (auto& t : *tiers) order.push_back(t.get());
  std::vector<w::ModelSpec> specs;
  if (!o.model.empty()) {
    auto spec = w::ParseModelSpec(o.model);
    if (!spec.ok()) return ModelUsage(StrCat("--model ", ToStd(spec.status().message())));
    specs.push_back(*spec);
  } else {
    auto listed = order.front()->ListModels(cluster.timeout);
    if (!listed.ok()) return ModelFailure(listed.status());
    for (const w::ModelRef& m : *listed) specs.push_back({m.name, m.version});
  }
  int rc = 0;
  for (const w::ModelSpec& spec : specs)
    rc = std::max(rc, PullOne(o, target, spec, order, json, cluster.timeout));
  return rc;
}

int RunVerify(const ModelCommandOptions& o, bool json) {
  if (o.checksum != "sha256")
    return ModelUsage(StrCat("--checksum ", o.checksum, ": expected sha256"));
  auto spec = w::ParseModelSpec(o.model);
  if (!spec.ok()) return ModelUsage(StrCat("--model ", ToStd(spec.status().message())));
  const std::string root = CacheDir(o);
  std::string version = spec->version;
  if (version.empty()) {
    auto newest = w::NewestVersion(w::ListModelIds(root), spec->name);
    if (!newest.ok()) return ModelFailure(newest.status());
    version = *newest;
  }
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  auto report = w::VerifyModel(root, spec->name, version, threads);
  if (!report.ok()) return ModelFailure(report.status());
  if (json) {
    nlohmann::json bad = nlohmann::json::array();
    for (const auto& b : report->bad) {
      bad.push_back({{"path", b.path}, {"chunk", b.chunk_index}, {"reason", b.reason}});
    }
    Print({{"model", spec->name},
           {"version", version},
           {"files", report->files},
           {"chunks", report->chunks},
           {"bytes", report->bytes},
           {"ok", report->bad.empty()},
           {"bad", bad}});
  } else {
    for (const auto& b : report->bad) {
      std::printf("BAD  %s %s: %s\n", b.path.c_str(),
                  b.chunk_index < 0 ? "(whole file)" : StrCat("chunk ", b.chunk_index).c_str(),
                  b.reason.c_str());
    }
    std::printf("%s@%s  %lu files, %lu chunks, %s: %s\n", spec->name.c_str(), version.c_str(),
                static_cast<unsigned long>(report->files),
                static_cast<unsigned long>(report->chunks), BytesToString(report->bytes).c_str(),
                report->bad.empty() ? "ok" : StrCat(report->bad.size(), " bad").c_str());
  }
  return report->bad.empty() ? 0 : 1;
}

int RunLs(const ModelCommandOptions& o, bool json) {
  const std::string dir = CacheDir(o);
  std::error_code ec;
  // A cache dir not made yet holds no models; one that is not a directory is a wrong flag.
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    return ModelUsage(StrCat("--cache-dir ", dir, ": not a directory"));
  }
  auto models = w::ListCachedModels(dir);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& m : models) {
      out.push_back({{"name", m.name},
                     {"version", m.version},
                     {"digest", m.digest},
                     {"total_bytes", m.total_bytes},
                     {"verified_bytes", m.verified_bytes},
                     {"complete", m.complete},
                     {"pinned", m.pinned}});
    }
    Print(out);
    return 0;
  }
  std::printf("%-32s  %-12s  %10s  %-10s  %-6s  %s\n", "NAME", "VERSION", "SIZE", "STATE", "PINNED",
              "DIGEST");
  for (const auto& m : models) {
    std::printf("%-32s  %-12s  %10s  %-10s  %-6s  %s\n", m.name.c_str(), m.version.c_str(),
                BytesToString(m.total_bytes).c_str(), m.complete ? "verified" : "partial",
                m.pinned ? "yes" : "no", m.digest.substr(0, 12).c_str());
  }
  return 0;
}

absl::StatusOr<w::ModelSpec> ExactModel(const ModelCommandOptions& o) {
  auto spec = w::ParseModelSpec(o.model);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(StrCat("--model ", ToStd(spec.status().message())));
  }
  if (spec->version.empty()) {
    return absl::InvalidArgumentError(StrCat("--model ", o.model, ": expected NAME@VERSION"));
  }
  return spec;
}

int RunPublish(const ModelCommandOptions& o, bool json) {
  auto chunk = ParseBytes(o.chunk_bytes);
  if (!chunk.ok()) return ModelUsage(StrCat("--chunk-bytes ", ToStd(chunk.status().message())));
  if (*chunk < w::kMinChunkBytes || *chunk > w::kMaxChunkBytes) {
    return ModelUsage(StrCat("--chunk-bytes ", o.chunk_bytes, ": expected ",
                             BytesToString(w::kMinChunkBytes), " to ",
                             BytesToString(w::kMaxChunkBytes)));
  }
  auto m = w::PublishModel(o.dir, o.origin, o.name, o.version,
                           {.chunk_bytes = *chunk, .threads = o.threads});
  if (!m.ok()) return ModelFailure(m.status());
  if (json) {
    Print({{"model", m->name},
           {"version", m->version},
           {"digest", w::ManifestDigest(*m)},
           {"files", m->files.size()},
           {"chunks", m->TotalChunks()},
           {"total_bytes", m->TotalBytes()}});
  } else {
    std::printf("published %s:%s  %zu files, %lu chunks, %s, digest %s\n", m->name.c_str(),
                m->version.c_str(), m->files.size(), static_cast<unsigned long>(m->TotalChunks()),
                BytesToString(m->TotalBytes()).c_str(), w::ManifestDigest(*m).c_str());
  }
  return 0;
}

void CheckSource(CLI::App* cmd, ModelCommandOptions& o) {
  cmd->add_option("--rack-cache", o.rack_cache,
                  "host:port of the rack's storage peer (default $EXASERVE_RACK_CACHE, else "
                  "the storage node of the rack of the node at --addr)");
  cmd->add_option("--origin", o.origin,
                  "host:port of the origin (default $EXASERVE_WEIGHTS_ORIGIN)");
  cmd->add_option("--parallel", o.parallel, "parallel chunk streams (default 8)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--tier-timeout", o.tier_timeout,
                  "one chunk from one tier may take this long before the next tier (default 60s)");
}

}  // namespace

void AddModelCommands(CLI::App& app, ModelCommands* c) {
  ModelCommandOptions& o = c->options;
  auto* model = app.add_subcommand("model", "publish, pull, verify and manage model weights");
  model->require_subcommand(1);
  auto cache_opt = [&](CLI::App* cmd) {
    cmd->add_option("--cache-dir", o.cache_dir,
                    "node model cache (default: $EXASERVE_CACHE_DIR, else the daemon's default)");
    cmd->add_flag("--json", o.json, "print JSON (lines) instead of text");
  };
  c->publish =
      model->add_subcommand("publish", "compute a model's manifest and add it to an origin");
  c->publish->add_option("--dir", o.dir, "model directory (Hugging Face layout)")->required();
  c->publish->add_option("--name", o.name, "model name")->required();
  c->publish->add_option("--version", o.version, "model version")->required();
  c->publish->add_option("--origin", o.origin, "origin directory (what --origin-dir serves)")
      ->required();
  c->publish->add_option("--chunk-bytes", o.chunk_bytes, "chunk size (default 64Mi)");
  c->publish->add_option("--threads", o.threads, "files hashed at once (default: all cores)");
  c->publish->add_flag("--json", o.json, "print JSON");

  c->pull = model->add_subcommand("pull", "bring a model into the node cache, verified");
  c->pull->add_option("--model", o.model, "NAME or NAME@VERSION (default: newest)")->required();
  c->pull->add_option("--source", o.source, "auto (rack cache, then origin), rack-cache or origin")
      ->check(CLI::IsMember({"auto", "rack-cache", "origin"}));
  cache_opt(c->pull);
  CheckSource(c->pull, o);

  c->sync = model->add_subcommand("sync", "pull every model the source has into the target");
  c->sync->add_option("--source", o.source, "rack-cache, origin or auto")
      ->check(CLI::IsMember({"auto", "rack-cache", "origin"}));
  c->sync->add_option("--target", o.target, "local-nvme (the --cache-dir) or a directory");
  c->sync->add_option("--model", o.model, "only this NAME[:VERSION]");
  cache_opt(c->sync);
  CheckSource(c->sync, o);

  c->verify = model->add_subcommand("verify", "re-hash a cached model; exit 1 naming bad chunks");
  c->verify->add_option("--model", o.model, "NAME or NAME@VERSION (default: newest)")->required();
  c->verify->add_option("--checksum", o.checksum, "sha256 (the only one)");
  c->verify->add_option("--threads", o.threads, "files hashed at once (default: all cores)");
  cache_opt(c->verify);

  c->ls = model->add_subcommand("ls", "models in the cache");
  cache_opt(c->ls);
  c->rm = model->add_subcommand("rm", "remove a model version from the cache");
  c->pin = model->add_subcommand("pin", "never evict this model version");
  c->unpin = model->add_subcommand("unpin", "let this model version be evicted again");
  for (CLI::App* cmd : {c->rm, c->pin, c->unpin}) {
    cmd->add_option("--model", o.model, "NAME@VERSION")->required();
    cache_opt(cmd);
  }
}

std::optional<int> RunModelCommands(const ModelCommands& c, bool json,
                                    const ClusterAccess& cluster) {
  const ModelCommandOptions& o = c.options;
  json = json || o.json;
  if (c.publish->parsed()) return RunPublish(o, json);
  if (c.pull->parsed()) return RunPull(o, json, cluster);
  if (c.sync->parsed()) return RunSync(o, json, cluster);
  if (c.verify->parsed()) return RunVerify(o, json);
  if (c.ls->parsed()) return RunLs(o, json);
  for (auto [cmd, op] : {std::pair{c.rm, 0}, std::pair{c.pin, 1}, std::pair{c.unpin, 2}}) {
    if (!cmd->parsed()) continue;
    auto spec = ExactModel(o);
    if (!spec.ok()) return ModelUsage(ToStd(spec.status().message()));
    absl::Status s = op == 0 ? w::RemoveModel(CacheDir(o), spec->name, spec->version)
                             : w::SetPinned(CacheDir(o), spec->name, spec->version, op == 1);
    if (!s.ok()) return ModelFailure(s);
    if (json) Print({{"model", spec->name}, {"version", spec->version}, {"ok", true}});
    return 0;
  }
  return std::nullopt;
}

}  // namespace exa::tools
