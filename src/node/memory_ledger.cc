#include "node/memory_ledger.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

#include "common/strings.h"

namespace exa::node {
namespace {

// "80Gi", "124.37Gi", "512Mi": two decimals at most, for people (BytesToString prefers exact
// forms such as "131932512Ki").
std::string Human(int64_t v) {
  v = std::max<int64_t>(0, v);
  const std::pair<int64_t, const char*> units[] = {{int64_t{1} << 40, "Ti"},
                                                   {int64_t{1} << 30, "Gi"},
                                                   {int64_t{1} << 20, "Mi"},
                                                   {int64_t{1} << 10, "Ki"}};
  for (const auto& [unit, name] : units) {
    if (v < unit) continue;
    if (v % unit == 0) return StrCat(v / unit, name);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f%s", static_cast<double>(v) / static_cast<double>(unit),
                  name);
    return buf;
  }
  return StrCat(v);
}

std::string DeviceName(int device) {
  return device < 0 ? std::string("host memory") : StrCat("GPU ", device);
}

}  // namespace

int64_t MemoryLedger::capacity(int device) const {
  auto it = capacity_.find(device);
  return it == capacity_.end() ? 0 : it->second;
}

int64_t MemoryLedger::used(int device) const {
  auto it = used_.find(device);
  return it == used_.end() ? 0 : it->second;
}

int64_t MemoryLedger::free(int device) const {
  const int64_t cap = capacity(device);
  if (cap <= 0) return std::numeric_limits<int64_t>::max() / 2;
  return cap - used(device);
}

absl::Status MemoryLedger::Reserve(const std::string& holder, int device, int64_t bytes) {
  if (holds_.count(holder) > 0) {
    return absl::AlreadyExistsError(StrCat("memory ledger: ", holder, " already holds memory"));
  }
  if (bytes < 0) {
    return absl::InvalidArgumentError(StrCat("memory ledger: ", bytes, " bytes: must be >= 0"));
  }
  const int64_t cap = capacity(device);
  // used + bytes with an explicit overflow check: written as `bytes > cap - used`, GCC folds the
  // comparison back into `used + bytes > cap`, which overflows for absurd sizes (UBSan saw it).
  int64_t after = 0;
  if (cap > 0 && (__builtin_add_overflow(used(device), bytes, &after) || after > cap)) {
    auto b = Human;
    return absl::FailedPreconditionError(StrCat(
        DeviceName(device), ": ", holder, " needs ", b(bytes), " but only ", b(cap - used(device)),
        " of ", b(cap), " are free (", b(used(device)), " promised to other replicas)"));
  }
  holds_[holder] = {device, bytes};
  used_[device] += bytes;
  return absl::OkStatus();
}

int64_t MemoryLedger::Release(const std::string& holder) {
  auto it = holds_.find(holder);
  if (it == holds_.end()) return 0;
  used_[it->second.device] -= it->second.bytes;
  const int64_t bytes = it->second.bytes;
  holds_.erase(it);
  return bytes;
}

int MemoryLedger::BestFit(const std::vector<int>& devices, int64_t bytes) const {
  int best = -1;
  int64_t best_free = -1;
  for (int d : devices) {
    const int64_t f = free(d);
    if (f >= bytes && f > best_free) best = d, best_free = f;
  }
  return best;
}

}  // namespace exa::node
