// The cached-block report in plain form (docs/architecture.md#prefix-cache): what a replica's
// prefix cache stored and evicted, as produced by the engine (engine/prefix_journal.h) and
// applied by a gateway's index (router/prefix_index.h); the node turns it into proto at the edge.
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/hash128.h"

namespace exa {

struct CacheEvent {
  bool stored = false;  // false: evicted
  Hash128 hash;
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
  // Events name every this-many-th block of a chain only (positions k-1, 2k-1, ...).
  int32_t report_every_blocks = 1;
  // On snapshots: the namespace the chain's root was made from (model, version, backend:
  // EngineOptions::prefix_cache_namespace), so a gateway hashes a prompt as this replica does.
  std::string cache_namespace;
  std::vector<CacheEvent> events;
  bool empty() const { return !snapshot && events.empty(); }
};

}  // namespace exa
