#include "engine/cuda/gpu.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "common/status.h"
#include "common/strings.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/noop.h"
#include "kernels/paged_attention.h"

namespace exa::engine::cuda {
namespace {

// ------------------------------------------------------------------ NVML through dlopen
// The few NVML entry points the inventory uses, declared here so no NVML header or link is
// needed: a machine without the driver simply has no libnvidia-ml.so.1.
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlReturn = int;  // 0: NVML_SUCCESS
struct NvmlPciInfo {     // nvmlPciInfo_t (v3)
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
constexpr unsigned kNvlinkMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (H100: 18 links)

class Nvml {
 public:
  Nvml() {
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    init_ = Sym<NvmlReturn (*)()>("nvmlInit_v2");
    shutdown_ = Sym<NvmlReturn (*)()>("nvmlShutdown");
    by_bus_ = Sym<NvmlReturn (*)(const char*, NvmlDevice*)>("nvmlDeviceGetHandleByPciBusId_v2");
    uuid_ = Sym<NvmlReturn (*)(NvmlDevice, char*, unsigned)>("nvmlDeviceGetUUID");
    link_state_ = Sym<NvmlReturn (*)(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkState");
    link_remote_ = Sym<NvmlReturn (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
        "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    memory_ = Sym<NvmlReturn (*)(NvmlDevice, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
    ok_ = init_ && shutdown_ && by_bus_ && uuid_ && link_state_ && link_remote_ && init_() == 0;
  }
  ~Nvml() {
    if (ok_) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }
  bool ok() const { return ok_; }

  NvmlDevice Device(const std::string& bus_id) const {
    NvmlDevice d = nullptr;
    return by_bus_(bus_id.c_str(), &d) == 0 ? d : nullptr;
  }
  bool Memory(NvmlDevice d, NvmlMemory* m) const { return memory_ && memory_(d, m) == 0; }
  std::string Uuid(NvmlDevice d) const {
    char buf[96] = {};
    return uuid_(d, buf, sizeof(buf)) == 0 ? std::string(buf) : std::string();
  }
  // PCI addresses (domain, bus, device) at the far end of each active NVLink.
  std::vector<std::array<unsigned, 3>> Links(NvmlDevice d) const {
    std::vector<std::array<unsigned, 3>> out;
    for (unsigned link = 0; link < kNvlinkMaxLinks; ++link) {
      int active = 0;
      if (link_state_(d, link, &active) != 0 || active == 0) continue;
      NvmlPciInfo info{};
      if (link_remote_(d, link, &info) == 0) out.push_back({info.domain, info.bus, info.device});
    }
    return out;
  }

 private:
  template <typename F>
  F Sym(const char* name) {
    return reinterpret_cast<F>(dlsym(handle_, name));
  }
  void* handle_ = nullptr;
  bool ok_ = false;
  NvmlReturn (*init_)() = nullptr;
  NvmlReturn (*shutdown_)() = nullptr;
  NvmlReturn (*by_bus_)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*uuid_)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*link_state_)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*link_remote_)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*memory_)(NvmlDevice, NvmlMemory*) = nullptr;
};

// NVLink peers: GPUs linked directly, and all GPUs that reach an NVSwitch (HGX boards link every
// GPU to the switches, not to each other). The domain is the lowest index of each connected group.
void FillNvlink(const Nvml& nvml, GpuInventory* inv,
                const std::vector<std::array<unsigned, 3>>& pci) {
  const size_t n = inv->devices.size();
  std::vector<std::vector<bool>> linked(n, std::vector<bool>(n, false));
  std::vector<bool> switched(n, false);
  for (size_t i = 0; i < n; ++i) {
    NvmlDevice d = nvml.Device(inv->devices[i].pci_bus_id);
    if (d == nullptr) continue;
    inv->devices[i].uuid = nvml.Uuid(d);
    for (const auto& remote : nvml.Links(d)) {
      auto it = std::find(pci.begin(), pci.end(), remote);
      if (it == pci.end()) {
        switched[i] = true;
      } else {
        linked[i][static_cast<size_t>(it - pci.begin())] = true;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j && (linked[i][j] || linked[j][i] || (switched[i] && switched[j]))) {
        inv->devices[i].nvlink_peers.push_back(static_cast<int>(j));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {  // connected groups by flooding from the lowest index
    if (inv->devices[i].nvlink_peers.empty() || inv->devices[i].nvlink_domain >= 0) continue;
    std::vector<size_t> stack = {i};
    while (!stack.empty()) {
      const size_t at = stack.back();
      stack.pop_back();
      if (inv->devices[at].nvlink_domain >= 0) continue;
      inv->devices[at].nvlink_domain = static_cast<int>(i);
      for (int peer : inv->devices[at].nvlink_peers) stack.push_back(static_cast<size_t>(peer));
    }
  }
}

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return kernels::CudaError(error, "cudaGetDeviceCount", __FILE__, __LINE__);
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device on this machine");
  return count;
}

// Device memory freed on every path out.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};
struct StreamAndEvents {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~StreamAndEvents() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  absl::Status Init() {
    EXA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    EXA_CUDA_CHECK(cudaEventCreate(&start));
    EXA_CUDA_CHECK(cudaEventCreate(&stop));
    return absl::OkStatus();
  }
  absl::StatusOr<double> Seconds() {
    EXA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    EXA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / 1e3;
  }
};

absl::StatusOr<double> GemmTflops(int device, const BurnInOptions& o) {
  EXA_CUDA_CHECK(cudaSetDevice(device));
  const int64_t n = o.gemm_size;
  DeviceBuffer a, b, c, workspace;
  EXA_CUDA_CHECK(cudaMalloc(&a.ptr, static_cast<size_t>(n * n * 2)));
  EXA_CUDA_CHECK(cudaMalloc(&b.ptr, static_cast<size_t>(n * n * 2)));
  EXA_CUDA_CHECK(cudaMalloc(&c.ptr, static_cast<size_t>(n * n * 4)));
  EXA_CUDA_CHECK(cudaMalloc(&workspace.ptr, kernels::kCublasWorkspaceBytes));
  // 0x3C3C in bf16 is ~0.0115: finite products, no denormals or infinities to skew the timing.
  EXA_CUDA_CHECK(cudaMemset(a.ptr, 0x3C, static_cast<size_t>(n * n * 2)));
  EXA_CUDA_CHECK(cudaMemset(b.ptr, 0x3C, static_cast<size_t>(n * n * 2)));
  StreamAndEvents s;
  EXA_RETURN_IF_ERROR(s.Init());
  EXA_ASSIGN_OR_RETURN(auto handle, kernels::CublasHandle::Create(s.stream, workspace.ptr,
                                                                  kernels::kCublasWorkspaceBytes));
  kernels::GemmParams g;
  g.w = a.ptr;
  g.x = b.ptr;
  g.out = static_cast<float*>(c.ptr);
  g.dtype = kernels::Dtype::kBF16;
  g.rows = g.n = g.k = g.x_stride = g.out_stride = n;
  EXA_RETURN_IF_ERROR(kernels::Gemm(*handle, g));  // warm-up: algorithm choice, clocks
  EXA_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
  for (int i = 0; i < o.gemm_iterations; ++i) EXA_RETURN_IF_ERROR(kernels::Gemm(*handle, g));
  EXA_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
  EXA_ASSIGN_OR_RETURN(double seconds, s.Seconds());
  return 2.0 * n * n * n * o.gemm_iterations / seconds / 1e12;
}

}  // namespace

GpuInventory DiscoverGpus() {
  GpuInventory inv;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    cudaGetLastError();
    inv.note = "no NVIDIA driver";
    return inv;
  }
  inv.driver_version = StrCat(driver / 1000, ".", (driver % 1000) / 10);
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    inv.note = StrCat("no usable GPU: ", cudaGetErrorString(e));
    return inv;
  }
  std::vector<std::array<unsigned, 3>> pci;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    GpuDevice d;
    d.index = i;
    d.name = prop.name;
    d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    d.multiprocessors = prop.multiProcessorCount;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess) d.pci_bus_id = bus;
    pci.push_back({static_cast<unsigned>(prop.pciDomainID), static_cast<unsigned>(prop.pciBusID),
                   static_cast<unsigned>(prop.pciDeviceID)});
    inv.devices.push_back(std::move(d));
  }
  Nvml nvml;
  if (nvml.ok()) {
    FillNvlink(nvml, &inv, pci);
  } else {
    inv.note = "NVML (libnvidia-ml.so.1) unavailable: no UUIDs or NVLink topology";
  }
  return inv;
}

absl::StatusOr<std::vector<GpuMemoryUse>> ReadGpuMemory(const GpuInventory& inventory) {
  // One NVML session for the process, opened at the first read and kept (NVML is thread-safe;
  // never closed, so no read races a shutdown at exit).
  static const Nvml* const nvml = new Nvml();
  if (!nvml->ok()) {
    return absl::FailedPreconditionError("NVML (libnvidia-ml.so.1) unavailable");
  }
  std::vector<GpuMemoryUse> out;
  for (const GpuDevice& d : inventory.devices) {
    NvmlDevice device = nvml->Device(d.pci_bus_id);
    NvmlMemory m{};
    if (device == nullptr || !nvml->Memory(device, &m)) continue;
    out.push_back({d.index, static_cast<int64_t>(m.used), static_cast<int64_t>(m.total)});
  }
  return out;
}

absl::StatusOr<std::vector<WarmUpTiming>> WarmUpGpus() {
  EXA_ASSIGN_OR_RETURN(int count, DeviceCount());
  std::vector<WarmUpTiming> out;
  for (int i = 0; i < count; ++i) {
    WarmUpTiming t;
    t.device = i;
    const auto start = std::chrono::steady_clock::now();
    EXA_CUDA_CHECK(cudaSetDevice(i));
    EXA_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context
    t.context_ms = MillisSince(start);
    auto at = std::chrono::steady_clock::now();
    cudaStream_t stream = nullptr;
    EXA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    absl::Status launched = kernels::LaunchNoop(stream);
    const cudaError_t synced = cudaStreamSynchronize(stream);
    t.noop_kernel_ms = MillisSince(at);
    at = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<kernels::CublasHandle>> handle =
        launched.ok() ? kernels::CublasHandle::Create(stream, nullptr, 0)
                      : absl::StatusOr<std::unique_ptr<kernels::CublasHandle>>(launched);
    t.cublas_ms = MillisSince(at);
    const absl::Status created = handle.status();
    handle = absl::StatusOr<std::unique_ptr<kernels::CublasHandle>>();  // destroys the handle
    cudaStreamDestroy(stream);
    EXA_RETURN_IF_ERROR(launched);
    EXA_CUDA_CHECK(synced);
    EXA_RETURN_IF_ERROR(created);
    t.total_ms = MillisSince(start);
    out.push_back(t);
  }
  return out;
}

absl::StatusOr<double> MeasureDeviceCopyBandwidth(int device, int64_t bytes) {
  EXA_CUDA_CHECK(cudaSetDevice(device));
  DeviceBuffer src, dst;
  EXA_CUDA_CHECK(cudaMalloc(&src.ptr, static_cast<size_t>(bytes)));
  EXA_CUDA_CHECK(cudaMalloc(&dst.ptr, static_cast<size_t>(bytes)));
  EXA_CUDA_CHECK(cudaMemset(src.ptr, 1, static_cast<size_t>(bytes)));
  StreamAndEvents s;
  EXA_RETURN_IF_ERROR(s.Init());
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {  // the first round warms clocks and TLBs
    EXA_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
    EXA_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToDevice, s.stream));
    EXA_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
    EXA_ASSIGN_OR_RETURN(double seconds, s.Seconds());
    if (rep > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds);
  }
  return best;
}

absl::StatusOr<std::vector<BurnInResult>> RunBurnIn(const BurnInOptions& o) {
  EXA_ASSIGN_OR_RETURN(int count, DeviceCount());
  std::vector<BurnInResult> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    EXA_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    BurnInResult r;
    r.device = i;
    r.name = prop.name;
    r.expected = ExpectedClass(r.name, static_cast<int64_t>(prop.totalGlobalMem));
    EXA_ASSIGN_OR_RETURN(r.gemm_tflops, GemmTflops(i, o));
    EXA_ASSIGN_OR_RETURN(r.copy_bytes_per_s, MeasureDeviceCopyBandwidth(i, o.copy_bytes));
    r.passed = true;
    if (r.expected.name == "unknown") {
      r.reason = "no expected figures for this device; measured values recorded only";
    } else if (r.gemm_tflops < r.expected.min_gemm_tflops) {
      r.passed = false;
      r.reason = StrCat("bf16 GEMM ", r.gemm_tflops, " TFLOP/s is below the ", r.expected.name,
                        " floor of ", r.expected.min_gemm_tflops);
    } else if (r.copy_bytes_per_s < r.expected.min_copy_bytes_per_s) {
      r.passed = false;
      r.reason = StrCat("copy bandwidth ", r.copy_bytes_per_s / 1e9, " GB/s is below the ",
                        r.expected.name, " floor of ", r.expected.min_copy_bytes_per_s / 1e9);
    }
    out.push_back(r);
  }
  return out;
}

absl::StatusOr<nlohmann::json> MeasureGemm(int device, int64_t rows, int64_t n, int64_t k) {
  EXA_CUDA_CHECK(cudaSetDevice(device));
  DeviceBuffer w, x, out, workspace;
  EXA_CUDA_CHECK(cudaMalloc(&w.ptr, static_cast<size_t>(n * k * 2)));
  EXA_CUDA_CHECK(cudaMalloc(&x.ptr, static_cast<size_t>(rows * k * 2)));
  EXA_CUDA_CHECK(cudaMalloc(&out.ptr, static_cast<size_t>(rows * n * 4)));
  EXA_CUDA_CHECK(cudaMalloc(&workspace.ptr, kernels::kCublasWorkspaceBytes));
  EXA_CUDA_CHECK(cudaMemset(w.ptr, 0x3C, static_cast<size_t>(n * k * 2)));
  EXA_CUDA_CHECK(cudaMemset(x.ptr, 0x3C, static_cast<size_t>(rows * k * 2)));
  StreamAndEvents s;
  EXA_RETURN_IF_ERROR(s.Init());
  EXA_ASSIGN_OR_RETURN(auto handle, kernels::CublasHandle::Create(s.stream, workspace.ptr,
                                                                  kernels::kCublasWorkspaceBytes));
  kernels::GemmParams g;
  g.w = w.ptr;
  g.x = x.ptr;
  g.out = static_cast<float*>(out.ptr);
  g.dtype = kernels::Dtype::kBF16;
  g.rows = rows;
  g.n = n;
  g.k = k;
  g.x_stride = k;
  g.out_stride = n;
  EXA_RETURN_IF_ERROR(kernels::Gemm(*handle, g));
  constexpr int kIterations = 20;
  EXA_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
  for (int i = 0; i < kIterations; ++i) EXA_RETURN_IF_ERROR(kernels::Gemm(*handle, g));
  EXA_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
  EXA_ASSIGN_OR_RETURN(double seconds, s.Seconds());
  seconds /= kIterations;
  nlohmann::json result = {{"rows", rows},
                           {"n", n},
                           {"k", k},
                           {"us", seconds * 1e6},
                           {"weight_bytes_per_s", 2.0 * n * k / seconds},
                           {"tflops", 2.0 * rows * n * k / seconds / 1e12}};
  // The backend's decode path for up to kGemvMaxRows rows: the GEMV on fp32 x.
  DeviceBuffer xf;
  EXA_CUDA_CHECK(cudaMalloc(&xf.ptr, static_cast<size_t>(rows * k * 4)));
  EXA_CUDA_CHECK(cudaMemset(xf.ptr, 0, static_cast<size_t>(rows * k * 4)));
  kernels::GemvParams v;
  v.targets[0] = {w.ptr, static_cast<float*>(out.ptr), n, n};
  v.w_dtype = kernels::Dtype::kBF16;
  v.x = static_cast<const float*>(xf.ptr);
  v.rows = rows;
  v.k = k;
  v.x_stride = k;
  if (v.Validate().ok()) {
    EXA_RETURN_IF_ERROR(kernels::LaunchGemv(v, s.stream));
    EXA_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
    for (int i = 0; i < kIterations; ++i) EXA_RETURN_IF_ERROR(kernels::LaunchGemv(v, s.stream));
    EXA_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
    EXA_ASSIGN_OR_RETURN(double gemv_seconds, s.Seconds());
    gemv_seconds /= kIterations;
    result["gemv_us"] = gemv_seconds * 1e6;
    result["gemv_weight_bytes_per_s"] = 2.0 * n * k / gemv_seconds;
  }
  return result;
}

absl::StatusOr<nlohmann::json> MeasurePagedAttentionDecode(int device, int32_t context,
                                                           int32_t batch, int32_t num_heads,
                                                           int32_t num_kv_heads, int32_t head_dim) {
  EXA_CUDA_CHECK(cudaSetDevice(device));
  constexpr int32_t kBlock = 16;
  const int32_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int64_t slots = int64_t{batch} * blocks_per_seq * kBlock;
  const int64_t kv_dim = int64_t{num_kv_heads} * head_dim;
  const int64_t half_bytes = slots * kv_dim * 2;
  // Metadata: positions | token_seq | tile_first | tile_count | block tables.
  std::vector<int32_t> meta(4 * static_cast<size_t>(batch) + static_cast<size_t>(slots / kBlock));
  for (int32_t s = 0; s < batch; ++s) {
    meta[s] = context - 1;
    meta[batch + s] = s;
    meta[2 * batch + s] = s;
    meta[3 * batch + s] = 1;
    for (int32_t b = 0; b < blocks_per_seq; ++b) {
      // Interleave the sequences' blocks, as a busy cache would.
      meta[4 * batch + s * blocks_per_seq + b] = b * batch + s;
    }
  }
  const int64_t q_floats = int64_t{batch} * num_heads * head_dim;
  DeviceBuffer kv, q, out, ws, md;
  EXA_CUDA_CHECK(cudaMalloc(&kv.ptr, static_cast<size_t>(2 * half_bytes)));
  EXA_CUDA_CHECK(cudaMemset(kv.ptr, 0x3C, static_cast<size_t>(2 * half_bytes)));
  EXA_CUDA_CHECK(cudaMalloc(&q.ptr, static_cast<size_t>(q_floats * 4)));
  EXA_CUDA_CHECK(cudaMemset(q.ptr, 0, static_cast<size_t>(q_floats * 4)));
  EXA_CUDA_CHECK(cudaMalloc(&out.ptr, static_cast<size_t>(q_floats * 4)));
  constexpr int64_t kWorkspaceFloats = int64_t{8} << 20;
  EXA_CUDA_CHECK(cudaMalloc(&ws.ptr, kWorkspaceFloats * 4));
  EXA_CUDA_CHECK(cudaMalloc(&md.ptr, meta.size() * 4));
  EXA_CUDA_CHECK(cudaMemcpy(md.ptr, meta.data(), meta.size() * 4, cudaMemcpyHostToDevice));
  const auto* m = static_cast<const int32_t*>(md.ptr);
  kernels::PagedAttentionParams p;
  p.q = static_cast<const float*>(q.ptr);
  p.out = static_cast<float*>(out.ptr);
  p.k_cache = kv.ptr;
  p.v_cache = static_cast<uint8_t*>(kv.ptr) + half_bytes;
  p.cache_dtype = kernels::Dtype::kBF16;
  p.positions = m;
  p.token_seq = m + batch;
  p.tile_first = m + 2 * batch;
  p.tile_count = m + 3 * batch;
  p.block_tables = m + 4 * batch;
  p.workspace = static_cast<float*>(ws.ptr);
  p.workspace_floats = kWorkspaceFloats;
  p.tokens = p.tiles = batch;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.block_size = kBlock;
  p.block_table_stride = blocks_per_seq;
  p.num_slots = slots;
  p.q_stride = p.out_stride = int64_t{num_heads} * head_dim;
  p.plan = kernels::PlanPagedAttention(batch, batch, num_heads, num_kv_heads, head_dim, context,
                                       kWorkspaceFloats);
  StreamAndEvents s;
  EXA_RETURN_IF_ERROR(s.Init());
  EXA_RETURN_IF_ERROR(kernels::LaunchPagedAttention(p, s.stream));
  constexpr int kIterations = 20;
  EXA_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
  for (int i = 0; i < kIterations; ++i) {
    EXA_RETURN_IF_ERROR(kernels::LaunchPagedAttention(p, s.stream));
  }
  EXA_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
  EXA_ASSIGN_OR_RETURN(double seconds, s.Seconds());
  seconds /= kIterations;
  const int64_t kv_bytes = int64_t{batch} * context * kv_dim * 2 * 2;
  return nlohmann::json{{"context", context},
                        {"batch", batch},
                        {"num_heads", num_heads},
                        {"num_kv_heads", num_kv_heads},
                        {"head_dim", head_dim},
                        {"splits", p.plan.splits},
                        {"seconds", seconds},
                        {"kv_bytes", kv_bytes},
                        {"bytes_per_s", static_cast<double>(kv_bytes) / seconds}};
}

}  // namespace exa::engine::cuda
