#include "weights/fetcher.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cluster/model_names.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"
#include "weights/layout.h"
#include "weights/model_cache.h"
#include "weights/sha256.h"

namespace exa::weights {
namespace {

// One file being brought in: its part file and which of its chunks are verified.
struct FileJob {
  const FileEntry* file = nullptr;
  fs::path final_path;
  fs::path part_path;
  fs::path done_path;
  int fd = -1;
  int direct_fd = -1;  // the same file opened O_DIRECT; -1 where the file system refuses it
  absl::Mutex mu;      // workers mark chunks of one file concurrently
  std::vector<bool> done ABSL_GUARDED_BY(mu);
  size_t remaining ABSL_GUARDED_BY(mu) = 0;
  bool finished ABSL_GUARDED_BY(mu) = false;
  absl::Time done_saved ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

struct ChunkTask {
  FileJob* job;
  uint32_t index;
};

void CloseFds(FileJob& job) {
  if (job.fd >= 0) ::close(job.fd);
  if (job.direct_fd >= 0) ::close(job.direct_fd);
  job.fd = -1;
  job.direct_fd = -1;
}

// O_DIRECT needs the file offset, the length and the buffer aligned; 4 KiB covers every common
// logical block size and DMA alignment.
constexpr uint64_t kDirectAlign = 4096;
constexpr size_t kHugePage = 2 << 20;

// A buffer a fetch thread reuses for O_DIRECT writes: the received pieces are copied into it (a
// hot, reused buffer) instead of into fresh page-cache pages. It is 2 MiB-aligned and asks for
// transparent huge pages: each O_DIRECT write pins the buffer's pages for the device, and one
// huge page is one pin where 4 KiB pages are 512.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { Release(); }

  char* Reserve(size_t n) {
    if (n <= capacity_) return data_;
    Release();
    // Mapped here rather than taken from malloc: from malloc, perf showed huge pages faulted in
    // and zeroed again and again during a pull (2 % of the node's CPU); mapped, once per thread.
    const size_t size = (n + kHugePage - 1) / kHugePage * kHugePage;
    void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXA_CHECK(raw != MAP_FAILED) << "cannot map a " << size
                                 << "-byte write buffer: " << std::strerror(errno);
    // Keep the 2 MiB-aligned part; unmap the slack on either side.
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > start) ::munmap(raw, aligned - start);
    const size_t tail = start + kHugePage - aligned;  // > 0: `aligned` is below start + 2 MiB
    ::munmap(reinterpret_cast<void*>(aligned + size), tail);
    data_ = reinterpret_cast<char*>(aligned);
    capacity_ = size;
    ::madvise(data_, capacity_, MADV_HUGEPAGE);  // advice only: EINVAL without THP is fine
    return data_;
  }

 private:
  void Release() {
    if (data_ != nullptr) ::munmap(data_, capacity_);
    data_ = nullptr;
    capacity_ = 0;
  }

  char* data_ = nullptr;
  size_t capacity_ = 0;
};

// Writes one message's pieces at `offset`: through O_DIRECT when the job has a direct fd and
// the range is block-aligned (every full message of a chunk), buffered otherwise (a file's tail,
// odd resume offsets). A direct write the file system refuses falls back to buffered.
absl::Status WriteMessage(FileJob& job, uint64_t offset, absl::Span<const std::string_view> pieces,
                          uint64_t size, AlignedBuffer& buffer) {
  if (job.direct_fd < 0 || offset % kDirectAlign != 0 || size % kDirectAlign != 0 || size == 0) {
    return WritePiecesAt(job.fd, job.part_path, offset, pieces);
  }
  char* out = buffer.Reserve(size);
  size_t at = 0;
  for (std::string_view p : pieces) {
    std::memcpy(out + at, p.data(), p.size());
    at += p.size();
  }
  for (size_t done = 0; done < size;) {
    ssize_t n = ::pwrite(job.direct_fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL) {
      // Alignment the device wants more of than 4 KiB: buffered from here on.
      std::string_view rest(out + done, size - done);
      return WritePiecesAt(job.fd, job.part_path, offset + done, {&rest, 1});
    }
    if (n < 0) return ErrnoStatus(errno, "write", job.part_path);
    done += static_cast<size_t>(n);
    if (done < size && done % kDirectAlign != 0) {
      std::string_view rest(out + done, size - done);
      return WritePiecesAt(job.fd, job.part_path, offset + done, {&rest, 1});
    }
  }
  return absl::OkStatus();
}

std::vector<bool> ReadDone(const fs::path& done_path, const FileEntry& f) {
  std::vector<bool> done(f.chunks.size(), false);
  auto text = ReadSmallFile(done_path, 64 << 20);
  if (!text.ok()) return done;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("sha256", std::string()) != f.sha256) return done;
  auto chunks = j.find("chunks");
  if (chunks == j.end() || !chunks->is_array()) return done;
  for (const auto& c : *chunks) {
    if (c.is_number_unsigned() && c.get<uint64_t>() < done.size()) done[c.get<size_t>()] = true;
  }
  return done;
}

absl::Status WriteDone(const FileJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);
absl::Status WriteDone(const FileJob& job) {
  nlohmann::json chunks = nlohmann::json::array();
  for (size_t i = 0; i < job.done.size(); ++i) {
    if (job.done[i]) chunks.push_back(i);
  }
  nlohmann::json j = {{"sha256", job.file->sha256}, {"chunks", std::move(chunks)}};
  return WriteFileAtomically(job.done_path, j.dump() + "\n");
}

}  // namespace

FetchMetrics::FetchMetrics(metrics::Registry& registry)
    : bytes(registry.AddCounter("exaserve_weights_pull_bytes_total",
                                "Chunk bytes a node received while pulling, by tier.", {"tier"})),
      corrupt_chunks(registry.SimpleCounter(
          "exaserve_weights_corrupt_chunks_total",
          "Chunks discarded because their bytes did not hash to the manifest's sha256.")),
      tier_failures(registry.SimpleCounter(
          "exaserve_weights_tier_failures_total",
          "Chunk fetches that failed on one tier and moved on to the next.")),
      pull_seconds(registry
                       .AddHistogram("exaserve_weights_pull_seconds",
                                     "Time to bring a model version into the node cache.", {},
                                     {0.1, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600})
                       .WithLabels({})) {}

Fetcher::Fetcher(std::vector<Tier*> tiers, FetchOptions options, FetchMetrics* metrics)
    : tiers_(std::move(tiers)), options_(std::move(options)), metrics_(metrics) {}

absl::StatusOr<Manifest> Fetcher::ResolveManifest(const std::string& name,
                                                  const std::string& version) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", name));
  const fs::path root = options_.cache_dir;
  if (!version.empty()) {
    EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", version));
    // Versions are immutable: a manifest already here is the version's manifest.
    auto local = LoadManifest(root, name, version);
    if (local.ok() || !absl::IsNotFound(local.status())) return local;
  }
  std::string errors;
  for (Tier* tier : tiers_) {
    auto m = tier->GetManifest(name, version, options_.manifest_timeout);
    if (m.ok()) {
      auto local = LoadManifest(root, m->name, m->version);
      if (local.ok() && ManifestDigest(*local) != ManifestDigest(*m)) {
        return absl::DataLossError(StrCat(tier->name(), " has other content for ", name, ":",
                                          m->version, " than ", root.string(),
                                          " (versions are immutable)"));
      }
      if (!local.ok()) EXA_RETURN_IF_ERROR(SaveManifest(root, *m));
      return m;
    }
    if (absl::IsNotFound(m.status()) || absl::IsInvalidArgument(m.status())) return m.status();
    StrAppend(&errors, errors.empty() ? "" : "; ", ToStd(m.status().message()));
  }
  if (version.empty()) {
    auto newest = NewestVersion(ListModelIds(root), name);
    if (newest.ok()) return LoadManifest(root, name, *newest);
  }
  return absl::UnavailableError(StrCat("no tier answered for the manifest of ", name,
                                       version.empty() ? "" : "@", version, ": ",
                                       errors.empty() ? "no tiers configured" : errors));
}

namespace {

// One pull of one model version: the files still to fetch, their chunk tasks, and the state the
// fetch threads share. Built by Prepare, run by Run, on the caller's thread plus parallel - 1.
class PullRun {
 public:
  PullRun(const std::vector<Tier*>& tiers, const FetchOptions& options, FetchMetrics* metrics,
          const Manifest& manifest, const std::function<void(const PullProgress&)>& progress)
      : tiers_(tiers),
        options_(options),
        metrics_(metrics),
        m_(manifest),
        progress_(progress),
        root_(options.cache_dir),
        tier_down_until_(tiers.size()),
        tier_bytes_(tiers.size()) {}

  ~PullRun() {
    for (auto& job : jobs_) CloseFds(*job);
  }

  // Files already verified are the local tier; the rest become chunk tasks, with their space
  // reserved up front so a full disk is reported before any byte is fetched.
  absl::Status Prepare() {
    for (const FileEntry& f : m_.files) {
      if (HasVerifiedMarker(root_, m_, f)) {
        local_bytes_ += f.size_bytes;
        continue;
      }
      absl::Status s = AddFile(f);
      if (!s.ok()) {
        RemovePartials();
        return s;
      }
    }
    done_bytes_ = local_bytes_;
    return absl::OkStatus();
  }

  absl::StatusOr<PullResult> Run(absl::Time start) {
    start_ = start;
    FinishEmptyFiles();
    int threads = std::max(1, std::min<int>(options_.parallel, static_cast<int>(tasks_.size())));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads && !tasks_.empty(); ++t) pool.emplace_back([this] { Work(); });
    Work();
    for (auto& t : pool) t.join();

    PullResult result;
    result.manifest = m_;
    result.local_bytes = local_bytes_;
    result.corrupt_chunks = corrupt_.load();
    result.tier_failures = tier_failures_.load();
    for (size_t t = 0; t < tiers_.size(); ++t) {
      result.bytes_by_tier[tiers_[t]->name()] = tier_bytes_[t].load();
    }
    result.elapsed = absl::Now() - start_;
    result.fetch_cpu = absl::Nanoseconds(fetch_cpu_ns_.load());
    absl::Status failure;
    {
      absl::MutexLock lock(&mu_);  // the workers are joined; the lock is for the analysis
      failure = failure_;
    }
    if (!failure.ok()) {
      // Disk full: nothing half-written stays behind. Other failures keep verified chunks, so
      // the next pull resumes.
      if (absl::IsResourceExhausted(failure)) {
        RemovePartials();
      } else {
        SaveResumeRecords();
      }
      return failure;
    }
    if (metrics_ != nullptr) metrics_->pull_seconds.Observe(absl::ToDoubleSeconds(result.elapsed));
    Report(true);
    return result;
  }

 private:
  absl::Status AddFile(const FileEntry& f) {
    const fs::path dir = ModelDir(root_, m_.name, m_.version);
    auto job = std::make_unique<FileJob>();
    job->file = &f;
    job->final_path = dir / f.path;
    job->part_path = dir / StrCat(f.path, kPartSuffix);
    job->done_path = StateDir(root_, m_.name, m_.version) / StrCat(f.path, ".done");
    FileJob& j = *job;
    jobs_.push_back(std::move(job));
    std::error_code ec;
    fs::create_directories(j.final_path.parent_path(), ec);
    if (ec) return ErrnoStatus(ec.value(), "create directory", j.final_path.parent_path());
    fs::create_directories(j.done_path.parent_path(), ec);
    // A final file without a marker (a crash after the rename) is re-checked, not trusted.
    fs::remove(j.final_path, ec);
    bool resume = fs::exists(j.part_path, ec) && fs::file_size(j.part_path, ec) == f.size_bytes;
    absl::MutexLock lock(&j.mu);  // no worker runs yet; the lock is for the analysis
    j.done = resume ? ReadDone(j.done_path, f) : std::vector<bool>(f.chunks.size(), false);
    j.fd = ::open(j.part_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (j.fd < 0) return ErrnoStatus(errno, "create", j.part_path);
    if (!resume && f.size_bytes > 0) {
      int err = ::posix_fallocate(j.fd, 0, static_cast<off_t>(f.size_bytes));
      if (err == EOPNOTSUPP || err == EINVAL) {
        err = ::ftruncate(j.fd, static_cast<off_t>(f.size_bytes)) == 0 ? 0 : errno;
      }
      if (err != 0) return ErrnoStatus(err, "reserve space for", j.part_path);
    }
    if (options_.direct_io) {
      // EINVAL: the file system has no O_DIRECT (tmpfs); buffered writes only.
      j.direct_fd = ::open(j.part_path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_DIRECT);
    }
    for (uint32_t i = 0; i < f.chunks.size(); ++i) {
      if (j.done[i]) {
        local_bytes_ += f.chunks[i].size_bytes;
      } else {
        tasks_.push_back({&j, i});
        ++j.remaining;
      }
    }
    return absl::OkStatus();
  }

  // Zero-byte files have no chunks: they are complete as soon as they exist.
  void FinishEmptyFiles() {
    for (auto& job : jobs_) {
      if (!job->file->chunks.empty()) continue;
      CloseFds(*job);
      if (::rename(job->part_path.c_str(), job->final_path.c_str()) != 0) {
        Fail(ErrnoStatus(errno, "rename into", job->final_path));
        continue;
      }
      {
        absl::MutexLock lock(&job->mu);
        job->finished = true;
      }
      absl::Status s = WriteVerifiedMarker(root_, m_, *job->file);
      if (!s.ok()) Fail(s);
    }
  }

  // CPU this thread has used so far.
  static absl::Duration ThreadCpu() {
    rusage u{};
    ::getrusage(RUSAGE_THREAD, &u);
    return absl::DurationFromTimeval(u.ru_utime) + absl::DurationFromTimeval(u.ru_stime);
  }

  void Work() {
    const absl::Duration cpu_before = ThreadCpu();
    WorkLoop();
    fetch_cpu_ns_ += absl::ToInt64Nanoseconds(ThreadCpu() - cpu_before);
  }

  void WorkLoop() {
    AlignedBuffer buffer;  // this thread's, for every chunk it fetches
    while (!stop_) {
      if (Cancelled()) {
        Fail(absl::CancelledError("pull cancelled"));
        return;
      }
      size_t i = next_task_++;
      if (i >= tasks_.size()) return;
      absl::Status s = FetchChunk(tasks_[i], buffer);
      if (!s.ok()) Fail(std::move(s));
    }
  }

  bool Cancelled() const { return options_.cancelled && options_.cancelled(); }

  void Fail(absl::Status s) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(s);
    stop_ = true;
  }

  void Report(bool finished) {
    if (!progress_) return;
    absl::MutexLock lock(&mu_);
    absl::Time now = absl::Now();
    if (!finished && now - last_progress_ < options_.progress_interval) return;
    last_progress_ = now;
    progress_({m_.TotalBytes(), done_bytes_.load(), local_bytes_, now - start_, finished});
  }

  // One chunk from the first tier that delivers bytes hashing to the manifest's sha256. A tier
  // that breaks off mid-chunk is marked down and the next resumes at the same byte; a tier whose
  // bytes hash wrong costs the chunk's bytes, which the next tier sends again from the start.
  absl::Status FetchChunk(const ChunkTask& task, AlignedBuffer& buffer) {
    const FileEntry& f = *task.job->file;
    const ChunkRef& c = f.chunks[task.index];
    const ChunkKey key{m_.name, m_.version, f.path, task.index};
    Sha256 hash;
    uint64_t at = 0;
    std::string errors;
    for (int round = 0; round < 2; ++round) {
      // Every tier failed once: a transient failure (a connection refused while a peer
      // restarts, a socket error under load) gets a moment to clear before the last try.
      if (round == 1 && !errors.empty()) absl::SleepFor(absl::Milliseconds(300));
      for (size_t t = 0; t < tiers_.size(); ++t) {
        if (stop_) return absl::CancelledError("pull stopped");
        // First round: skip tiers that failed recently. Second: ask every tier again.
        if (round == 0 && absl::ToUnixNanos(absl::Now()) < tier_down_until_[t].load()) continue;
        Tier& tier = *tiers_[t];
        for (int busy = 0;; ++busy) {
          absl::Status local_error;
          absl::Status s = tier.FetchChunk(
              key, at, c.size_bytes, options_.tier_timeout,
              [&](uint64_t offset, absl::Span<const std::string_view> pieces) -> absl::Status {
                if (stop_ || Cancelled()) return local_error = absl::CancelledError("pull stopped");
                // Hash first, while the received bytes are in cache; the write reads them again.
                uint64_t size = 0;
                for (std::string_view p : pieces) {
                  hash.Update(p);
                  size += p.size();
                }
                local_error = WriteMessage(*task.job, c.offset + offset, pieces, size, buffer);
                if (!local_error.ok()) return local_error;
                at = offset + size;
                tier_bytes_[t] += size;
                if (metrics_ != nullptr) {
                  metrics_->bytes.WithLabels({tier.name()}).Increment(double(size));
                }
                return absl::OkStatus();
              });
          if (!local_error.ok()) return local_error;  // our disk, not the tier: stop the pull
          if (s.ok()) {
            std::string got = hash.FinalHex();
            if (got == c.sha256) {
              EXA_RETURN_IF_ERROR(MarkDone(*task.job, task.index));
              done_bytes_ += c.size_bytes;
              Report(false);
              return absl::OkStatus();
            }
            CountCorrupt(tier, f, task.index, got);
            StrAppend(&errors, errors.empty() ? "" : "; ", tier.name(), ": sha256 mismatch");
            at = 0;
            break;
          }
          if (absl::IsResourceExhausted(s) && busy < options_.busy_retries) {
            absl::SleepFor(absl::Milliseconds(20 * std::min(busy + 1, 10)));
            continue;
          }
          ++tier_failures_;
          if (metrics_ != nullptr) metrics_->tier_failures.Increment();
          StrAppend(&errors, errors.empty() ? "" : "; ", ToStd(s.message()));
          if (absl::IsDataLoss(s)) {
            hash = Sha256();  // the stream was inconsistent: its bytes are not kept
            at = 0;
          } else {
            tier_down_until_[t] = absl::ToUnixNanos(absl::Now() + options_.tier_backoff);
          }
          EXA_LOG_WARN("weights", "tier failed, trying the next",
                       {{"tier", tier.name()},
                        {"path", f.path},
                        {"chunk", static_cast<int64_t>(task.index)},
                        {"resume_at", static_cast<int64_t>(at)},
                        {"error", std::string(s.message())}});
          break;
        }
      }
    }
    return absl::UnavailableError(
        StrCat("model ", m_.name, "@", m_.version, " file \"", f.path, "\" chunk ", task.index,
               ": every tier failed: ", errors.empty() ? "no tiers configured" : errors));
  }

  void CountCorrupt(const Tier& tier, const FileEntry& f, uint32_t index, const std::string& got) {
    ++corrupt_;
    if (metrics_ != nullptr) metrics_->corrupt_chunks.Increment();
    EXA_LOG_WARN("weights", "corrupt chunk discarded",
                 {{"tier", tier.name()},
                  {"model", StrCat(m_.name, "@", m_.version)},
                  {"path", f.path},
                  {"chunk", static_cast<int64_t>(index)},
                  {"sha256", got},
                  {"expected", f.chunks[index].sha256}});
  }

  // Marks a verified chunk; the last one of a file makes the file visible.
  absl::Status MarkDone(FileJob& job, uint32_t index) {
    absl::MutexLock lock(&job.mu);
    job.done[index] = true;
    if (--job.remaining > 0) {
      // The resume record is refreshed at most once a second (each costs an fsync of the part
      // file and of the record): a crash loses at most a second of verified chunks.
      absl::Time now = absl::Now();
      if (now - job.done_saved < absl::Seconds(1)) return absl::OkStatus();
      job.done_saved = now;
      if (::fdatasync(job.fd) != 0) return ErrnoStatus(errno, "fsync", job.part_path);
      return WriteDone(job);
    }
    // Also makes the O_DIRECT writes durable: their extents and the device's write cache.
    if (::fdatasync(job.fd) != 0) return ErrnoStatus(errno, "fsync", job.part_path);
    CloseFds(job);
    if (::rename(job.part_path.c_str(), job.final_path.c_str()) != 0) {
      return ErrnoStatus(errno, "rename into", job.final_path);
    }
    job.finished = true;
    EXA_RETURN_IF_ERROR(FsyncDirectory(job.final_path.parent_path()));
    EXA_RETURN_IF_ERROR(WriteVerifiedMarker(root_, m_, *job.file));
    ::unlink(job.done_path.c_str());
    return absl::OkStatus();
  }

  void RemovePartials() {
    for (auto& job : jobs_) {
      CloseFds(*job);
      absl::MutexLock lock(&job->mu);  // the workers are joined; the lock is for the analysis
      if (!job->finished) {
        ::unlink(job->part_path.c_str());
        ::unlink(job->done_path.c_str());
      }
    }
  }

  // Records every verified chunk (data first), so the next pull resumes from here.
  void SaveResumeRecords() {
    for (auto& job : jobs_) {
      if (job->fd < 0) continue;
      if (::fdatasync(job->fd) == 0) {
        absl::MutexLock lock(&job->mu);  // the workers are joined
        WriteDone(*job).IgnoreError();
      }
      CloseFds(*job);
    }
  }

  const std::vector<Tier*>& tiers_;
  const FetchOptions& options_;
  FetchMetrics* const metrics_;
  const Manifest& m_;
  const std::function<void(const PullProgress&)>& progress_;
  const fs::path root_;
  std::vector<std::unique_ptr<FileJob>> jobs_;
  std::vector<ChunkTask> tasks_;
  uint64_t local_bytes_ = 0;
  absl::Time start_;

  absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // the first fatal error; stops every worker
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<bool> stop_{false};
  std::atomic<size_t> next_task_{0};
  std::vector<std::atomic<int64_t>> tier_down_until_;  // unix ns
  std::atomic<uint64_t> done_bytes_{0};
  std::atomic<uint64_t> corrupt_{0};
  std::atomic<uint64_t> tier_failures_{0};
  std::atomic<int64_t> fetch_cpu_ns_{0};
  std::vector<std::atomic<uint64_t>> tier_bytes_;
};

}  // namespace

absl::StatusOr<PullResult> Fetcher::Pull(const std::string& name, const std::string& version,
                                         const std::function<void(const PullProgress&)>& progress) {
  const absl::Time start = absl::Now();
  EXA_ASSIGN_OR_RETURN(Manifest m, ResolveManifest(name, version));
  // One pull of a version into a cache at a time: a second waits, then finds the files verified.
  EXA_ASSIGN_OR_RETURN(VersionLock lock,
                       VersionLock::Acquire(options_.cache_dir, m.name, m.version, /*wait=*/true));
  // A removal may have come between resolving the manifest and the lock.
  if (std::error_code ec; !fs::exists(ManifestPath(options_.cache_dir, m.name, m.version), ec)) {
    EXA_RETURN_IF_ERROR(SaveManifest(options_.cache_dir, m));
  }
  PullRun run(tiers_, options_, metrics_, m, progress);
  EXA_RETURN_IF_ERROR(run.Prepare());
  return run.Run(start);
}

}  // namespace exa::weights
