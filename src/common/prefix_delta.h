// The cached-block report in plain form (docs/architecture.md#prefix-cache): what a replica's
// prefix cache stored and evicted, as produced by the engine (engine/prefix_journal.h) and
// applied by a gateway's index (router/prefix_index.h); the node turns it into proto at the edge.
//
// Thread safety: plain values.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash128.h"
#include "common/strings.h"

namespace exa {

// The namespace a replica's chains start from: replicas of one model and version on one backend
// compute the same K and V for a prefix, others do not.
inline std::string CacheNamespace(std::string_view model, std::string_view version,
                                  std::string_view backend) {
  return StrCat(model, "@", version, "/", backend);
}
// Whether `cache_namespace` is one of `model`'s (of `version`, when not empty).
inline bool CacheNamespaceOf(std::string_view cache_namespace, std::string_view model,
                             std::string_view version) {
  if (!cache_namespace.starts_with(model)) return false;
  std::string_view rest = cache_namespace.substr(model.size());
  if (!rest.starts_with('@')) return false;
  rest.remove_prefix(1);
  return version.empty() ||
         (rest.starts_with(version) && rest.substr(version.size()).starts_with('/'));
}

struct CacheEvent {
  bool stored = false;  // false: evicted
  Hash128 hash;
};

// Which blocks of a chain a replica names in its report. A chained hash names its whole prefix,
// so naming some blocks is enough for a reader to find a request's cached prefix, to within the
// stride at that depth. Counting in units of `every_blocks`, the first 7 units are each named;
// from there the stride doubles with every doubling of the depth (kNamesPerDoubling names per
// doubling) until it reaches `max_every_blocks`. So a short system prompt is found to within
// `every_blocks`, a long history to within a quarter of its length (or `max_every_blocks`), and
// a chain costs names logarithmic in its length up to the cap, linear past it at 1/max stride.
// max_every_blocks == every_blocks is a fixed stride. Positions are 1-based block counts: block
// number i of a chain (0-based) is position i + 1.
struct ReportSchedule {
  static constexpr int64_t kNamesPerDoubling = 4;

  int32_t every_blocks = 1;
  // Rounded down to every_blocks times a power of two (Normalized()).
  int32_t max_every_blocks = 1;

  ReportSchedule Normalized() const {
    ReportSchedule s;
    s.every_blocks = std::max(1, every_blocks);
    const auto ratio = static_cast<uint32_t>(std::max(1, max_every_blocks / s.every_blocks));
    s.max_every_blocks = s.every_blocks * static_cast<int32_t>(std::bit_floor(ratio));
    return s;
  }
  // The stride, in units of every_blocks, at unit `u` (>= 1) of a normalized schedule.
  int64_t UnitStride(int64_t u) const {
    const int64_t doubling = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(u)));
    return std::clamp<int64_t>(doubling / kNamesPerDoubling, 1, max_every_blocks / every_blocks);
  }
  bool Reports(int64_t position) const {
    if (position < 1 || position % every_blocks != 0) return false;
    const int64_t u = position / every_blocks;
    return u % UnitStride(u) == 0;
  }
  // The first reported position after `position` (0, or itself a reported position).
  int64_t Next(int64_t position) const {
    const int64_t u = position / every_blocks;
    return u == 0 ? every_blocks : (u + UnitStride(u)) * every_blocks;
  }
  bool operator==(const ReportSchedule&) const = default;
};

struct PrefixCacheDelta {
  // The journal's identity: a replica that restarts (or another replica under the same id) has
  // another, and a reader of an older epoch must take a snapshot. 0 on deltas read from the wire
  // (they follow the snapshot of their epoch).
  uint64_t epoch = 0;
  // When true, `events` (all stored) replace the reader's set as of `to`; else they are the
  // events numbered (from, to], in order (a hash may be stored, evicted and stored again).
  bool snapshot = false;
  uint64_t from = 0;
  uint64_t to = 0;
  // The blocks of a chain events name (normalized).
  ReportSchedule report;
  // On snapshots: the namespace the chain's root was made from (model, version, backend:
  // EngineOptions::prefix_cache_namespace), so a gateway hashes a prompt as this replica does.
  std::string cache_namespace;
  std::vector<CacheEvent> events;
  bool empty() const { return !snapshot && events.empty(); }
};

}  // namespace exa
