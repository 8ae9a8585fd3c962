#include "tools/weights_bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "bench/process.h"
#include "bench/route_workload.h"
#include "common/check.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "engine/safetensors.h"
#include "metrics/registry.h"
#include "net/grpc_server.h"
#include "weights/fetcher.h"
#include "weights/layout.h"
#include "weights/model_cache.h"
#include "weights/publish.h"
#include "weights/rack_cache.h"
#include "weights/sha256.h"
#include "weights/weights_service.h"

namespace exa::tools {
namespace {

namespace fs = std::filesystem;
namespace w = exa::weights;

constexpr char kName[] = "bench-model";
constexpr char kVersion[] = "v1";
constexpr size_t kBlockBytes = 8 << 20;
// The synthetic model: a chunk or more, and at most what a scratch disk could hold K + 3 times.
constexpr uint64_t kMinModelBytes = 1ull << 20;
constexpr uint64_t kMaxModelBytes = 1ull << 40;

double Gbps(uint64_t bytes, absl::Duration d) {
  return double(bytes) / 1e9 / std::max(1e-9, absl::ToDoubleSeconds(d));
}

// Incompressible bytes, fast: xorshift64 (the bench measures moving bytes, not making them).
absl::Status WriteSyntheticModel(const fs::path& dir, const WeightsBenchOptions& o) {
  fs::create_directories(dir);
  std::vector<uint64_t> block(kBlockBytes / 8);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  const uint64_t per_file = o.model_bytes / static_cast<uint64_t>(o.files);
  for (int f = 0; f < o.files; ++f) {
    fs::path path = dir / fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, o.files);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return w::ErrnoStatus(errno, "create", path);
    for (uint64_t done = 0; done < per_file;) {
      for (auto& v : block) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v = x;
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(kBlockBytes, per_file - done));
      if (::write(fd, block.data(), n) != static_cast<ssize_t>(n)) {
        int err = errno;
        ::close(fd);
        return w::ErrnoStatus(err, "write", path);
      }
      done += n;
    }
    ::fsync(fd);
    ::close(fd);
  }
  return w::WriteFileAtomically(dir / "config.json", "{\"model_type\": \"synthetic\"}\n");
}

std::unique_ptr<net::GrpcServer> Serve(grpc::Service* service) {
  net::GrpcServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  auto server = std::make_unique<net::GrpcServer>(o);
  server->RegisterService(service);
  if (!server->Start().ok()) return nullptr;
  return server;
}

// CPU seconds this process has used (all threads, user + system).
double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Rate {
  double gbps = 0;
  double cpu_seconds_per_gb = 0;  // this process's CPU (sender and receiver) per GB moved
};

// Raw single-connection loopback TCP throughput: the network baseline for a pull. With CPUs
// given, the sender and the receiver are pinned to them.
Rate LoopbackTcp(uint64_t bytes, int sender_cpu = -1, int receiver_cpu = -1) {
  const double cpu_before = ProcessCpuSeconds();
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::listen(listener, 1);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread sender([&] {
    bench::ScopedCpuPin pin(sender_cpu);
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    std::vector<char> buf(1 << 20, 'x');
    for (uint64_t sent = 0; sent < bytes;) {
      ssize_t n = ::send(s, buf.data(), std::min<uint64_t>(buf.size(), bytes - sent), 0);
      if (n <= 0) break;
      sent += static_cast<uint64_t>(n);
    }
    ::close(s);
  });
  int conn = ::accept(listener, nullptr, nullptr);
  std::vector<char> buf(1 << 20);
  absl::Duration took;
  uint64_t got = 0;
  {
    bench::ScopedCpuPin pin(receiver_cpu);
    absl::Time start = absl::Now();
    while (true) {
      ssize_t n = ::recv(conn, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
    took = absl::Now() - start;
  }
  sender.join();
  ::close(conn);
  ::close(listener);
  return {Gbps(got, took), (ProcessCpuSeconds() - cpu_before) / std::max(1e-9, double(got) / 1e9)};
}

double Sha256Gbps(uint64_t bytes, int cpu = -1) {
  if (cpu >= 0) {
    double gbps = 0;
    std::thread([&] {
      bench::ScopedCpuPin pin(cpu);
      gbps = Sha256Gbps(bytes);
    }).join();
    return gbps;
  }
  std::vector<char> buf(64 << 20, 'y');
  w::Sha256 h;
  absl::Time start = absl::Now();
  for (uint64_t done = 0; done < bytes; done += buf.size()) h.Update(buf.data(), buf.size());
  h.FinalHex();
  return Gbps(bytes / buf.size() * buf.size(), absl::Now() - start);
}

// Sequential write of `bytes` to a new file under `dir` and its fdatasync, the way a pull writes
// (O_DIRECT from an aligned buffer where the file system takes it; buffered where it does not),
// pinned to `cpu`: the disk's share of the bound a pull is held to. The file is removed.
struct DiskRate {
  double gbps = 0;
  bool direct = false;
};
absl::StatusOr<DiskRate> DiskWrite(const fs::path& dir, uint64_t bytes, int cpu) {
  DiskRate rate;
  absl::Status status;
  std::thread([&] {
    bench::ScopedCpuPin pin(cpu);
    const fs::path path = dir / "disk-write-baseline";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    rate.direct = fd >= 0;
    if (fd < 0) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      status = absl::InternalError(StrCat(path.string(), ": ", std::strerror(errno)));
      return;
    }
    constexpr size_t kWrite = 8 << 20;
    void* buf = nullptr;
    EXA_CHECK(::posix_memalign(&buf, 4096, kWrite) == 0) << "cannot allocate a write buffer";
    std::memset(buf, 'z', kWrite);
    const absl::Time start = absl::Now();
    uint64_t done = 0;
    while (done < bytes) {
      ssize_t n = ::pwrite(fd, buf, std::min<uint64_t>(kWrite, bytes - done), off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += uint64_t(n);
    }
    const bool synced = ::fdatasync(fd) == 0;
    const absl::Duration took = absl::Now() - start;
    if (done < bytes || !synced) {
      status = absl::InternalError(StrCat(path.string(), ": write: ", std::strerror(errno)));
    }
    rate.gbps = Gbps(done, took);
    std::free(buf);
    ::close(fd);
    ::unlink(path.c_str());
  }).join();
  if (!status.ok()) return status;
  return rate;
}

// The 1-minute load average: on a shared machine it says how much of it the run really had.
double LoadAverage() {
  double load[1] = {0};
  return ::getloadavg(load, 1) == 1 ? load[0] : -1;
}

void DropPageCache(const std::vector<fs::path>& files) {
  for (const fs::path& p : files) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// The baseline: one sequential read() pass over the files.
absl::StatusOr<absl::Duration> RawRead(const std::vector<fs::path>& files) {
  std::vector<char> buf(kBlockBytes);
  absl::Time start = absl::Now();
  for (const fs::path& p : files) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return w::ErrnoStatus(errno, "open", p);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    while (::read(fd, buf.data(), buf.size()) > 0) {
    }
    ::close(fd);
  }
  return absl::Now() - start;
}

// "Start replica" to "weights ready" the way the engine loads: check the manifest and each
// file's verified marker (no re-hash), then engine::MapFilesResident, the function the engine's
// ModelWeights::Load maps a checkpoint's shards with: every file read in and every page mapped
// and read once, the files in parallel, one per core. The clock stops with the weights ready; the
// mappings are dropped after it, as a replica drops them only when it stops (unmapping 2 GiB in
// a process with many threads costs TLB shootdowns that are no part of a load).
absl::StatusOr<absl::Duration> LoadVerified(const fs::path& root) {
  absl::Time start = absl::Now();
  EXA_ASSIGN_OR_RETURN(fs::path dir, w::VerifiedModelDir(root, kName, kVersion));
  EXA_ASSIGN_OR_RETURN(w::Manifest m, w::LoadManifest(root, kName, kVersion));
  std::vector<std::string> paths;
  for (const w::FileEntry& f : m.files) {
    if (f.size_bytes > 0) paths.push_back((dir / f.path).string());
  }
  EXA_ASSIGN_OR_RETURN(auto maps, engine::MapFilesResident(paths));
  absl::Duration took = absl::Now() - start;
  maps.clear();
  return took;
}

// (d) The peer in its own process on one CPU and the node in its own on another: a node whose
// peer is another machine, which is what a rack looks like. The peer is a real `exaserved
// --role storage --origin-dir` (a warm rack cache serves hits through the same chunk reader);
// the node is a real `exaserve-cli model pull`. The bound is measured the same way: TCP from a
// sender on the peer's CPU to a receiver on the node's, sha256 on the node's one CPU.
absl::StatusOr<nlohmann::json> SplitCoresPull(const WeightsBenchOptions& o, const fs::path& root,
                                              const fs::path& origin_root, uint64_t model_bytes) {
  const std::string bin_dir = o.bin_dir.empty() ? bench::SelfDir() : o.bin_dir;
  const std::string daemon = StrCat(bin_dir, "/exaserved");
  const std::string cli = StrCat(bin_dir, "/exaserve-cli");
  // The CPUs this process may use (a container's cpuset need not start at 0); by default the
  // peer gets the first and the node the second.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> usable;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) usable.push_back(c);
    }
  }
  const int peer_cpu = o.peer_cpu >= 0 ? o.peer_cpu : (usable.size() >= 2 ? usable[0] : -1);
  const int node_cpu = o.node_cpu >= 0 ? o.node_cpu : (usable.size() >= 2 ? usable[1] : -1);
  const auto is_usable = [&](int c) { return c >= 0 && c < CPU_SETSIZE && CPU_ISSET(c, &allowed); };
  if (peer_cpu == node_cpu || !is_usable(peer_cpu) || !is_usable(node_cpu)) {
    return nlohmann::json{
        {"skipped", StrCat("needs two distinct CPUs this process may use (", usable.size(),
                           " usable): peer ", peer_cpu, ", node ", node_cpu)}};
  }
  if (::access(daemon.c_str(), X_OK) != 0 || ::access(cli.c_str(), X_OK) != 0) {
    return nlohmann::json{{"skipped", StrCat("exaserved and exaserve-cli not found in ", bin_dir)}};
  }
  EXA_ASSIGN_OR_RETURN(
      auto peer, bench::Process::Start(daemon, (root / "split-peer").string(),
                                       {"--role", "storage", "--origin-dir", origin_root.string()},
                                       {}, peer_cpu));
  nlohmann::json by_streams = nlohmann::json::object();
  double best = 0;
  for (int streams : o.streams) {
    std::vector<double> gbps, cpu_per_gb;
    for (int rep = 0; rep < std::max(1, o.repeats); ++rep) {
      const fs::path cache = root / "split-node";
      fs::remove_all(cache);
      std::vector<std::string> argv = {cli,
                                       "model",
                                       "pull",
                                       "--model",
                                       StrCat(kName, "@", kVersion),
                                       "--source",
                                       "origin",
                                       "--origin",
                                       peer->grpc_target(),
                                       "--cache-dir",
                                       cache.string(),
                                       "--parallel",
                                       std::to_string(streams),
                                       "--json"};
      EXA_ASSIGN_OR_RETURN(
          bench::CommandResult r,
          bench::RunCommand(argv, (root / "split-node.out").string(), node_cpu, absl::Minutes(10)));
      if (r.exit_code != 0) {
        return absl::InternalError(
            StrCat("exaserve-cli model pull exited ", r.exit_code, ": ",
                   r.output.substr(r.output.size() > 2000 ? r.output.size() - 2000 : 0)));
      }
      // The last JSON line is the summary; its elapsed_seconds excludes process start-up.
      double elapsed = absl::ToDoubleSeconds(r.wall);
      const size_t at = r.output.rfind("{\"bytes_by_tier\"");
      if (at != std::string::npos) {
        auto j = nlohmann::json::parse(r.output.substr(at), nullptr, false);
        if (!j.is_discarded() && j.contains("elapsed_seconds")) elapsed = j["elapsed_seconds"];
      }
      gbps.push_back(double(model_bytes) / 1e9 / std::max(1e-9, elapsed));
      cpu_per_gb.push_back(r.cpu_seconds / (double(model_bytes) / 1e9));
    }
    fs::remove_all(root / "split-node");
    const double median = bench::Quantile(gbps, 0.5);
    by_streams[std::to_string(streams)] = {
        {"gbps_median", median},
        {"gbps_runs", gbps},
        {"node_cpu_seconds_per_gb_median", bench::Quantile(cpu_per_gb, 0.5)}};
    best = std::max(best, median);
  }
  peer->Stop();
  std::vector<double> tcp_runs, sha_runs;
  for (int i = 0; i < 3; ++i) {
    tcp_runs.push_back(
        LoopbackTcp(std::min<uint64_t>(model_bytes, 4ull << 30), peer_cpu, node_cpu).gbps);
    sha_runs.push_back(Sha256Gbps(1ull << 30, node_cpu));
  }
  const double tcp = bench::Quantile(tcp_runs, 0.5), sha = bench::Quantile(sha_runs, 0.5);
  const double bound = std::min(tcp, sha * 1);
  // Not in the issue's bound, which leaves the disk out: every pulled byte is also written and
  // synced, so a disk slower than hashing caps the pull below it whatever the code does.
  std::vector<double> disk_runs;
  bool disk_direct = false;
  for (int i = 0; i < 3; ++i) {
    // Whole MiBs (O_DIRECT takes aligned sizes only; the model has a small config.json too).
    const uint64_t bytes = std::min<uint64_t>(model_bytes, 2ull << 30) / (1 << 20) * (1 << 20);
    EXA_ASSIGN_OR_RETURN(DiskRate d, DiskWrite(root, bytes, node_cpu));
    disk_runs.push_back(d.gbps);
    disk_direct = d.direct;
  }
  const double disk = bench::Quantile(disk_runs, 0.5);
  return nlohmann::json{
      {"peer_cpu", peer_cpu},
      {"node_cpu", node_cpu},
      {"node_cores", 1},
      {"by_streams", by_streams},
      {"best_median_gbps", best},
      {"loopback_tcp_gbps_peer_cpu_to_node_cpu", tcp},
      {"loopback_tcp_runs", tcp_runs},
      {"sha256_gbps_node_cpu", sha},
      {"sha256_runs", sha_runs},
      {"bound_gbps", bound},
      {"ratio_to_bound", best / bound},
      {"meets_0_7", best >= 0.7 * bound},
      {"diagnostic_disk_write_gbps", disk},
      {"diagnostic_disk_write_runs", disk_runs},
      {"diagnostic_disk_write_direct", disk_direct},
      {"diagnostic_ratio_to_bound_with_disk", best / std::min(bound, disk)},
      {"note",
       "peer: exaserved --role storage --origin-dir pinned to peer_cpu; node: exaserve-cli model "
       "pull --source origin pinned to node_cpu (every chunk hashed, written, fsynced, renamed); "
       "each stream count run `repeats` times, median (nearest rank); bound = min(TCP "
       "peer_cpu -> node_cpu, sha256 on node_cpu x 1 core); diagnostic_disk_write: the same "
       "bytes written sequentially (O_DIRECT when direct) and fdatasync'd from node_cpu, "
       "which the bound leaves out"}};
}

}  // namespace

absl::StatusOr<nlohmann::json> RunWeightsBench(const WeightsBenchOptions& o) {
  if (o.files < 1 || o.nodes < 1 || o.parallel < 1) {
    return absl::InvalidArgumentError("--files, --nodes and --parallel must be >= 1");
  }
  if (o.model_bytes < kMinModelBytes || o.model_bytes > kMaxModelBytes) {
    return absl::InvalidArgumentError(StrCat("--size ", BytesToString(o.model_bytes), ": allowed ",
                                             BytesToString(kMinModelBytes), " to ",
                                             BytesToString(kMaxModelBytes)));
  }
  // The scratch directory, with any parents it lacks, is made here and removed afterwards.
  std::vector<fs::path> made;  // deepest first
  for (fs::path p = fs::absolute(o.dir); !p.empty() && !fs::exists(p); p = p.parent_path()) {
    made.push_back(p);
  }
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("--dir ", o.dir, ": ", ec.message()));
  std::random_device rd;
  const fs::path root = fs::path(o.dir) / StrCat("exaserve-weights-bench-", rd());
  struct Cleanup {
    fs::path root;
    std::vector<fs::path> made;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(root, ec);
      for (const fs::path& p : made) fs::remove(p, ec);  // only while empty
    }
  } cleanup{root, made};
  // Space: the origin, the rack cache, and K node copies at once in phase (a).
  struct statvfs vfs {};
  if (::statvfs(o.dir.c_str(), &vfs) == 0) {
    const uint64_t free_bytes = uint64_t(vfs.f_bavail) * vfs.f_frsize;
    const uint64_t need = o.model_bytes * uint64_t(o.nodes + 3);  // <= 1Ti x 67: no overflow
    if (free_bytes < need) {
      return absl::ResourceExhaustedError(StrCat(o.dir, ": ", BytesToString(free_bytes),
                                                 " free, the bench needs ", BytesToString(need)));
    }
  }
  nlohmann::json out;
  out["setup"] = {{"model_bytes", o.model_bytes},
                  {"files", o.files},
                  {"chunk_bytes", o.chunk_bytes},
                  {"hardware_threads", std::thread::hardware_concurrency()},
                  {"load_average_1m_at_start", LoadAverage()},
                  {"note",
                   "one process: origin and rack cache are gRPC servers on 127.0.0.1, nodes are "
                   "fetcher threads with their own channels and cache dirs; all share this "
                   "machine's cores and disk"}};

  const fs::path origin_root = root / "origin";
  EXA_RETURN_IF_ERROR(WriteSyntheticModel(w::ModelDir(origin_root, kName, kVersion), o));
  absl::Time publish_start = absl::Now();
  EXA_ASSIGN_OR_RETURN(w::Manifest manifest,
                       w::PublishModel(w::ModelDir(origin_root, kName, kVersion), origin_root,
                                       kName, kVersion, {.chunk_bytes = o.chunk_bytes}));
  const uint64_t model_bytes = manifest.TotalBytes();
  out["publish"] = {{"seconds", absl::ToDoubleSeconds(absl::Now() - publish_start)},
                    {"chunks", manifest.TotalChunks()}};

  metrics::Registry origin_registry, peer_registry;
  w::ServiceOptions service_options{.max_streams_total = 1024,
                                    .max_streams_per_client = 1024};  // all nodes are 127.0.0.1
  w::DirectorySource origin_source(origin_root.string());
  w::WeightsService origin_service(origin_source, service_options, origin_registry, "origin");
  auto origin_server = Serve(&origin_service);
  if (!origin_server) return absl::UnavailableError("cannot start the origin server");
  const std::string origin_addr = StrCat("127.0.0.1:", origin_server->port());
  auto upstream = w::MakeGrpcTier("origin", origin_addr);
  w::RackCache cache({.root = (root / "rack").string(), .budget_bytes = 4 * model_bytes}, *upstream,
                     peer_registry);
  EXA_RETURN_IF_ERROR(cache.Start());
  w::WeightsService peer_service(cache, service_options, peer_registry, "rack-cache");
  auto peer_server = Serve(&peer_service);
  if (!peer_server) return absl::UnavailableError("cannot start the rack cache server");
  const std::string peer_addr = StrCat("127.0.0.1:", peer_server->port());

  // (a) Rack cold start: K nodes pull at once through the cold peer.
  {
    std::vector<std::thread> nodes;
    std::vector<absl::Status> results(o.nodes);
    absl::Time start = absl::Now();
    for (int i = 0; i < o.nodes; ++i) {
      nodes.emplace_back([&, i] {
        w::GrpcTierOptions g{.connections = o.parallel};
        auto peer = w::MakeGrpcTier("rack-cache", peer_addr, g);
        auto origin = w::MakeGrpcTier("origin", origin_addr, g);
        w::FetchOptions f;
        f.cache_dir = (root / StrCat("node", i)).string();
        f.parallel = o.parallel;
        results[i] = w::Fetcher({peer.get(), origin.get()}, f).Pull(kName, kVersion).status();
      });
    }
    for (auto& t : nodes) t.join();
    absl::Duration took = absl::Now() - start;
    for (const absl::Status& s : results) EXA_RETURN_IF_ERROR(s);
    bool all_verified = true;
    absl::Time verify_start = absl::Now();
    for (int i = 0; i < o.nodes; ++i) {
      auto report = w::VerifyModel(root / StrCat("node", i), kName, kVersion,
                                   static_cast<int>(std::thread::hardware_concurrency()));
      all_verified = all_verified && report.ok() && report->bad.empty();
    }
    double verify_seconds = absl::ToDoubleSeconds(absl::Now() - verify_start);
    for (int i = 0; i < o.nodes; ++i) fs::remove_all(root / StrCat("node", i));
    out["rack_cold_start"] = {
        {"nodes", o.nodes},
        {"parallel_per_node", o.parallel},
        {"seconds", absl::ToDoubleSeconds(took)},
        {"origin_bytes", origin_service.served_bytes()},
        {"origin_bytes_ratio", double(origin_service.served_bytes()) / double(model_bytes)},
        {"peer_bytes", peer_service.served_bytes()},
        {"aggregate_gbps", Gbps(model_bytes * uint64_t(o.nodes), took)},
        {"every_copy_verified", all_verified},
        {"reverify_seconds", verify_seconds},
        {"peer_cache_misses", cache.stats().misses},
        {"peer_cache_coalesced", cache.stats().coalesced}};
  }

  // (b) One node from the warm peer at 1/4/8/16 streams, beside the baselines.
  nlohmann::json by_streams = nlohmann::json::object();
  nlohmann::json cpu_by_streams = nlohmann::json::object();
  double best = 0;
  fs::path last_node;
  for (int streams : o.streams) {
    auto peer = w::MakeGrpcTier("rack-cache", peer_addr, {.connections = streams});
    w::FetchOptions f;
    f.cache_dir = (root / StrCat("streams", streams)).string();
    f.parallel = streams;
    double cpu_before = ProcessCpuSeconds();
    EXA_ASSIGN_OR_RETURN(w::PullResult r, w::Fetcher({peer.get()}, f).Pull(kName, kVersion));
    double cpu = ProcessCpuSeconds() - cpu_before;
    double gbps = Gbps(model_bytes, r.elapsed);
    by_streams[std::to_string(streams)] = gbps;
    // Cores this process kept busy (peer and node together), and bytes per CPU second: what
    // the pull costs, independent of how much of a shared machine the run got.
    const double node_cpu = absl::ToDoubleSeconds(r.fetch_cpu);
    cpu_by_streams[std::to_string(streams)] = {
        {"cores_busy", cpu / std::max(1e-9, absl::ToDoubleSeconds(r.elapsed))},
        {"gb_per_cpu_second_peer_and_node", double(model_bytes) / 1e9 / std::max(1e-9, cpu)},
        // The fetch threads alone (receive, hash, write): what the node would spend with the
        // peer on another machine. gRPC's own threads are not in it.
        {"node_fetch_threads_cpu_seconds_per_gb", node_cpu / (double(model_bytes) / 1e9)}};
    best = std::max(best, gbps);
    if (!last_node.empty()) fs::remove_all(last_node);
    last_node = f.cache_dir;
  }
  const Rate tcp_rate = LoopbackTcp(std::min<uint64_t>(model_bytes, 4ull << 30));
  const double tcp = tcp_rate.gbps;
  const double sha = Sha256Gbps(1ull << 30);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double bound = std::min(tcp, sha * cores);
  // Diagnostic only (the target is ratio_to_bound): the bound lets TCP and hashing each have
  // every core, but here the peer's sending, the node's receiving and its hashing share the
  // same cores. Had the two baseline workloads alone shared them, at the CPU per GB they cost
  // in this run, no pull could beat this rate (the pull also reads, frames and writes).
  const double sha_cpu_per_gb = 1.0 / std::max(1e-9, sha);
  const double shared_ceiling = double(cores) / (tcp_rate.cpu_seconds_per_gb + sha_cpu_per_gb);
  out["pull_from_peer"] = {{"gbps_by_streams", by_streams},
                           {"cpu_by_streams", cpu_by_streams},
                           {"load_average_1m", LoadAverage()},
                           {"best_gbps", best},
                           {"loopback_tcp_gbps", tcp},
                           {"sha256_gbps_one_core", sha},
                           {"cores", cores},
                           {"bound_gbps", bound},
                           {"ratio_to_bound", best / bound},
                           {"meets_0_7", best >= 0.7 * bound},
                           {"diagnostic_shared_cores",
                            {{"loopback_tcp_cpu_seconds_per_gb", tcp_rate.cpu_seconds_per_gb},
                             {"sha256_cpu_seconds_per_gb", sha_cpu_per_gb},
                             {"ceiling_gbps", shared_ceiling},
                             {"best_over_ceiling", best / shared_ceiling},
                             {"note",
                              "cores / (TCP + sha256 CPU seconds per GB): the most the two "
                              "baselines could do sharing this machine's cores, as the pull "
                              "must; not the target's bound"}}}};

  if (o.split_cores) {
    EXA_ASSIGN_OR_RETURN(out["pull_split_cores"],
                         SplitCoresPull(o, root, origin_root, model_bytes));
  }

  // (c) Weights ready vs a raw sequential read of the same files, cold and warm page cache.
  std::vector<fs::path> files;
  for (const w::FileEntry& f : manifest.files) {
    files.push_back(w::ModelDir(last_node, kName, kVersion) / f.path);
  }
  DropPageCache(files);
  EXA_ASSIGN_OR_RETURN(absl::Duration raw_cold, RawRead(files));
  DropPageCache(files);
  EXA_ASSIGN_OR_RETURN(absl::Duration load_cold, LoadVerified(last_node));
  absl::Duration raw_warm = absl::InfiniteDuration(), load_warm = absl::InfiniteDuration();
  // Best of seven, alternating: each run is a fraction of a second, and on a shared machine
  // single runs of either vary by up to 3x (0.14-0.42 s for the same 2 GiB load).
  for (int i = 0; i < 7; ++i) {
    EXA_ASSIGN_OR_RETURN(absl::Duration r, RawRead(files));
    EXA_ASSIGN_OR_RETURN(absl::Duration l, LoadVerified(last_node));
    raw_warm = std::min(raw_warm, r);
    load_warm = std::min(load_warm, l);
  }
  out["load_vs_raw_read"] = {
      {"cold", absl::ToDoubleSeconds(load_cold) / absl::ToDoubleSeconds(raw_cold)},
      {"warm", absl::ToDoubleSeconds(load_warm) / absl::ToDoubleSeconds(raw_warm)},
      {"cold_seconds",
       {{"load", absl::ToDoubleSeconds(load_cold)}, {"raw_read", absl::ToDoubleSeconds(raw_cold)}}},
      {"warm_seconds",
       {{"load", absl::ToDoubleSeconds(load_warm)}, {"raw_read", absl::ToDoubleSeconds(raw_warm)}}},
      {"load",
       "manifest + verified markers (no re-hash), engine::MapFilesResident (the engine's "
       "shard loader): mmap(MAP_POPULATE) of every file and every page read once, the files "
       "in parallel, one per core; the raw read is one thread"},
      {"cold_method", "posix_fadvise(DONTNEED) on every file before the run"}};
  peer_server->Shutdown(absl::Now());
  origin_server->Shutdown(absl::Now());
  return out;
}

}  // namespace exa::tools
