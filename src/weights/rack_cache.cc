#include "weights/rack_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "cluster/model_names.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "weights/layout.h"
#include "weights/sha256.h"

namespace exa::weights {
namespace {

constexpr std::string_view kChunksDir = ".chunks";
constexpr size_t kMaxCachedManifests = 256;  // models a rack serves at once, with room to spare

}  // namespace

RackCache::RackCache(RackCacheOptions options, Tier& upstream, metrics::Registry& registry)
    : options_(std::move(options)),
      upstream_(upstream),
      hits_metric_(registry.SimpleCounter("exaserve_weights_cache_hits_total",
                                          "Chunk requests served from the rack cache's disk.")),
      misses_metric_(registry.SimpleCounter("exaserve_weights_cache_misses_total",
                                            "Chunk requests that started an upstream fetch.")),
      coalesced_metric_(registry.SimpleCounter(
          "exaserve_weights_cache_coalesced_total",
          "Chunk requests that waited for another request's upstream fetch (single flight).")),
      upstream_bytes_metric_(registry.SimpleCounter("exaserve_weights_cache_upstream_bytes_total",
                                                    "Chunk bytes fetched from upstream.")),
      evictions_metric_(registry.SimpleCounter("exaserve_weights_cache_evictions_total",
                                               "Chunks evicted to stay under the byte budget.")),
      evicted_bytes_metric_(registry.SimpleCounter("exaserve_weights_cache_evicted_bytes_total",
                                                   "Bytes evicted to stay under the budget.")),
      corrupt_metric_(registry.SimpleCounter(
          "exaserve_weights_cache_corrupt_upstream_total",
          "Upstream chunks refused because their bytes did not hash to the manifest's sha256.")),
      corrupt_local_metric_(registry.SimpleCounter(
          "exaserve_weights_cache_corrupt_local_total",
          "Cached chunks dropped because their bytes on disk no longer hashed right.")),
      in_flight_metric_(registry.SimpleGauge("exaserve_weights_cache_upstream_fetches_in_flight",
                                             "Upstream chunk fetches running now.")),
      cached_bytes_metric_(
          registry.SimpleGauge("exaserve_weights_cache_bytes", "Chunk bytes held on disk.")),
      over_budget_metric_(registry.SimpleGauge(
          "exaserve_weights_cache_over_budget_bytes",
          "Bytes over the budget that pinned or in-flight chunks keep from being evicted.")) {
  registry.AddGaugeCallback("exaserve_weights_cache_budget_bytes", "The cache's byte budget.",
                            [b = options_.budget_bytes] { return static_cast<double>(b); });
}

RackCache::~RackCache() = default;

std::string RackCache::ChunkPath(const std::string& sha) const {
  return (fs::path(options_.root) / kChunksDir / sha.substr(0, 2) / sha).string();
}

absl::Status RackCache::Start() {
  std::error_code ec;
  fs::path chunks = fs::path(options_.root) / kChunksDir;
  fs::remove_all(chunks / "tmp", ec);
  fs::create_directories(chunks / "tmp", ec);
  if (ec) return ErrnoStatus(ec.value(), "create directory", chunks / "tmp");
  struct Found {
    std::string sha;
    uint64_t size;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  for (const auto& prefix : fs::directory_iterator(chunks, ec)) {
    if (prefix.path().filename() == "tmp" || !prefix.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(prefix.path(), ec)) {
      std::string sha = f.path().filename().string();
      if (!IsSha256Hex(sha) || !f.is_regular_file()) continue;
      found.push_back({sha, f.file_size(), f.last_write_time()});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  absl::MutexLock lock(&mu_);
  for (const Found& f : found) Insert(f.sha, f.size, /*verified=*/false);
  EvictOverBudget();
  EXA_LOG_INFO("weights", "rack cache indexed",
               {{"root", options_.root},
                {"chunks", static_cast<int64_t>(index_.size())},
                {"bytes", static_cast<int64_t>(stats_.cached_bytes)}});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ModelRef>> RackCache::ListModels() {
  auto upstream = upstream_.ListModels(options_.manifest_timeout);
  if (upstream.ok()) return upstream;
  // Upstream down: what this cache holds is still servable.
  DirectorySource local(options_.root);
  return local.ListModels();
}

absl::StatusOr<Manifest> RackCache::GetManifest(const std::string& name,
                                                const std::string& version) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", name));
  std::string v = version;
  if (!v.empty()) {
    EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", v));
    auto local = LoadManifest(options_.root, name, v);
    if (local.ok() || !absl::IsNotFound(local.status())) return local;
  }
  auto m = upstream_.GetManifest(name, v, options_.manifest_timeout);
  if (!m.ok()) {
    if (v.empty() && !absl::IsNotFound(m.status())) {
      // Upstream unreachable: the newest version this cache knows.
      auto newest = NewestVersion(ListModelIds(options_.root), name);
      if (newest.ok()) return LoadManifest(options_.root, name, *newest);
    }
    return m.status();
  }
  EXA_RETURN_IF_ERROR(SaveManifest(options_.root, *m));
  return m;
}

absl::StatusOr<std::unique_ptr<ChunkReader>> RackCache::OpenChunk(
    const ChunkKey& key, const std::function<bool()>& cancelled) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", key.version));
  const std::string id = StrCat(key.name, ":", key.version);
  std::shared_ptr<const Manifest> m;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = manifests_.find(id); it != manifests_.end()) m = it->second;
  }
  if (m == nullptr) {
    EXA_ASSIGN_OR_RETURN(Manifest loaded, GetManifest(key.name, key.version));
    m = std::make_shared<const Manifest>(std::move(loaded));
    absl::MutexLock lock(&mu_);
    if (manifests_.size() >= kMaxCachedManifests) manifests_.clear();
    manifests_[id] = m;
  }
  EXA_ASSIGN_OR_RETURN(const ChunkRef* chunk, FindChunk(*m, key));
  const std::string& sha = chunk->sha256;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::shared_ptr<Flight> flight;
    bool leader = false;
    bool verified = true;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = index_.find(sha); it != index_.end()) {
        verified = it->second.verified;
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        ++stats_.hits;
        hits_metric_.Increment();
      } else if (auto f = flights_.find(sha); f != flights_.end()) {
        flight = f->second;
        ++stats_.coalesced;
        coalesced_metric_.Increment();
      } else {
        flight = std::make_shared<Flight>();
        flights_[sha] = flight;
        leader = true;
        ++stats_.misses;
        misses_metric_.Increment();
      }
    }
    if (leader) {
      in_flight_metric_.Add(1);
      absl::Status s = FetchUpstream(key, *chunk);
      in_flight_metric_.Add(-1);
      absl::MutexLock lock(&mu_);
      if (s.ok()) {
        Insert(sha, chunk->size_bytes, /*verified=*/true);
        EvictOverBudget();
      }
      flight->status = s;
      flights_.erase(sha);
      flight->done.Notify();
      if (!s.ok()) return s;
    } else if (flight) {
      while (!flight->done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
        if (cancelled && cancelled()) return absl::CancelledError("client cancelled");
      }
      if (!flight->status.ok()) return flight->status;
    }
    int fd = ::open(ChunkPath(sha).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      auto reader = std::make_unique<ChunkReader>(fd, 0, chunk->size_bytes);
      if (!verified) {
        reader->RequestVerification(sha, [this, sha](bool ok) { OnServedHash(sha, ok); });
      }
      return reader;
    }
    // Evicted or removed between the lookup and the open: forget it and fetch again.
    absl::MutexLock lock(&mu_);
    Drop(sha);
  }
  return absl::UnavailableError(StrCat("rack cache: chunk ", sha, " keeps disappearing"));
}

absl::Status RackCache::FetchUpstream(const ChunkKey& key, const ChunkRef& chunk) {
  fs::path tmp;
  {
    absl::MutexLock lock(&mu_);
    tmp = fs::path(options_.root) / kChunksDir / "tmp" / StrCat(chunk.sha256, ".", ++tmp_counter_);
  }
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", tmp);
  Sha256 hash;
  uint64_t at = 0;
  absl::Status s;
  auto sink = [&](uint64_t offset, absl::Span<const std::string_view> pieces) -> absl::Status {
    // Written before hashed: a failed write leaves the hash over exactly the bytes kept, so
    // the next attempt resumes it.
    EXA_RETURN_IF_ERROR(WritePiecesAt(fd, tmp, offset, pieces));
    uint64_t size = 0;
    for (std::string_view p : pieces) {
      hash.Update(p);
      size += p.size();
    }
    at = offset + size;
    upstream_bytes_metric_.Increment(static_cast<double>(size));
    absl::MutexLock lock(&mu_);
    stats_.upstream_bytes += size;
    return absl::OkStatus();
  };
  for (int attempt = 0; attempt < options_.upstream_attempts; ++attempt) {
    // Resumes where the last attempt stopped; the hash continues over the bytes already kept.
    s = upstream_.FetchChunk(key, at, chunk.size_bytes, options_.upstream_timeout, sink);
    if (s.ok() || absl::IsResourceExhausted(s) || absl::IsInvalidArgument(s) ||
        absl::IsNotFound(s)) {
      break;
    }
  }
  if (s.ok()) {
    std::string got = hash.FinalHex();
    if (got != chunk.sha256) {
      corrupt_metric_.Increment();
      absl::MutexLock lock(&mu_);
      ++stats_.corrupt_upstream;
      s = absl::DataLossError(StrCat(upstream_.name(), " sent ", key.path, " chunk ",
                                     key.chunk_index, " with sha256 ", got, ", expected ",
                                     chunk.sha256));
    }
  }
  if (s.ok() && ::fdatasync(fd) != 0) s = ErrnoStatus(errno, "fsync", tmp);
  ::close(fd);
  if (s.ok()) {
    fs::path final_path = ChunkPath(chunk.sha256);
    std::error_code ec;
    fs::create_directories(final_path.parent_path(), ec);
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      s = ErrnoStatus(errno, "rename into", final_path);
    }
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    EXA_LOG_WARN("weights", "upstream chunk fetch failed",
                 {{"model", StrCat(key.name, ":", key.version)},
                  {"path", key.path},
                  {"chunk", static_cast<int64_t>(key.chunk_index)},
                  {"error", std::string(s.message())}});
  }
  return s;
}

void RackCache::Insert(const std::string& sha, uint64_t size_bytes, bool verified) {
  if (index_.count(sha) != 0) return;
  lru_.push_front(sha);
  index_[sha] = Entry{size_bytes, lru_.begin(), verified};
  stats_.cached_bytes += size_bytes;
  cached_bytes_metric_.Set(static_cast<double>(stats_.cached_bytes));
}

void RackCache::Drop(const std::string& sha) {
  auto it = index_.find(sha);
  if (it == index_.end()) return;
  stats_.cached_bytes -= it->second.size_bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  cached_bytes_metric_.Set(static_cast<double>(stats_.cached_bytes));
}

void RackCache::OnServedHash(const std::string& sha, bool ok) {
  absl::MutexLock lock(&mu_);
  if (ok) {
    if (auto it = index_.find(sha); it != index_.end()) it->second.verified = true;
    return;
  }
  // The bytes on disk went bad (the client will see the mismatch too and try its next tier):
  // drop the chunk so the next request fetches a good copy from upstream.
  EXA_LOG_ERROR("weights", "cached chunk is corrupt on disk; dropped", {{"sha256", sha}});
  ::unlink(ChunkPath(sha).c_str());
  Drop(sha);
  ++stats_.corrupt_local;
  corrupt_local_metric_.Increment();
}

std::set<std::string> RackCache::PinnedChunks() const {
  std::set<std::string> pinned;
  std::error_code ec;
  for (const ModelId& id : ListModelIds(options_.root)) {
    if (!fs::exists(PinPath(options_.root, id.name, id.version), ec)) continue;
    auto m = LoadManifest(options_.root, id.name, id.version);
    if (!m.ok()) continue;
    for (const FileEntry& f : m->files) {
      for (const ChunkRef& c : f.chunks) pinned.insert(c.sha256);
    }
  }
  return pinned;
}

void RackCache::EvictOverBudget() {
  if (stats_.cached_bytes <= options_.budget_bytes) {
    over_budget_metric_.Set(0);
    return;
  }
  const std::set<std::string> pinned = PinnedChunks();
  auto it = lru_.end();
  while (stats_.cached_bytes > options_.budget_bytes && it != lru_.begin()) {
    --it;
    if (pinned.count(*it) != 0) continue;
    const std::string sha = *it;
    auto entry = index_.find(sha);
    // Readers that have the file open keep reading it after the unlink.
    ::unlink(ChunkPath(sha).c_str());
    stats_.cached_bytes -= entry->second.size_bytes;
    ++stats_.evictions;
    evictions_metric_.Increment();
    evicted_bytes_metric_.Increment(static_cast<double>(entry->second.size_bytes));
    it = lru_.erase(it);
    index_.erase(entry);
  }
  cached_bytes_metric_.Set(static_cast<double>(stats_.cached_bytes));
  over_budget_metric_.Set(stats_.cached_bytes > options_.budget_bytes
                              ? static_cast<double>(stats_.cached_bytes - options_.budget_bytes)
                              : 0.0);
}

RackCache::Stats RackCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace exa::weights
