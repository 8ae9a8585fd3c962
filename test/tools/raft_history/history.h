// The history of a Jepsen-style run against the scheduler's spec store
// (docs/testing.md#control-plane): one JSON line per event, an invocation and, later, its
// completion, with CLOCK_MONOTONIC timestamps so that several processes on one machine (the
// clients, then the final reads) write one comparable history.
//
// Outcomes are recorded as the client saw them: ok, fail (the call definitely changed nothing)
// or unknown (it may have taken effect, now or later). An invocation with no completion (a
// client killed mid-call) counts as unknown. CheckHistory maps the events to
// exa::testing::KvOperation and runs the Wing–Gong checker per key.
//
// Thread safety: HistoryWriter is safe to share between threads; the rest are plain functions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace exa::raft_history {

enum class OpKind { kPut, kDelete, kRead };
enum class Outcome { kOk, kFail, kUnknown };

const char* OpKindName(OpKind kind);
const char* OutcomeName(Outcome outcome);

// Nanoseconds on CLOCK_MONOTONIC: one clock for every process of a run on this machine.
int64_t MonotonicNanos();

struct Invocation {
  uint64_t op = 0;  // unique within the history
  int client = 0;
  OpKind kind = OpKind::kRead;
  std::string key;
  std::string value;  // kPut: the unique value written
  std::string node;   // the scheduler address called
  bool final_read = false;
  int64_t time_ns = 0;
};

struct Completion {
  uint64_t op = 0;
  Outcome outcome = Outcome::kUnknown;
  std::optional<std::string> value;  // kRead ok: what it returned (nullopt: absent)
  uint64_t version = 0;              // kRead ok of a present key: its version (the Raft index)
  std::string error;                 // fail / unknown: the status the client got
  int64_t time_ns = 0;
};

// Appends events to a JSONL file, one flushed line each, so a killed run keeps what it saw.
class HistoryWriter {
 public:
  // Appends to `path` (created when missing).
  static absl::StatusOr<std::unique_ptr<HistoryWriter>> Open(const std::string& path);
  ~HistoryWriter();

  void Invoke(const Invocation& inv);
  void Complete(const Completion& done);

 private:
  explicit HistoryWriter(FILE* file) : file_(file) {}
  void WriteLine(const std::string& line);

  absl::Mutex mu_;
  FILE* file_ ABSL_GUARDED_BY(mu_);
};

struct CheckOptions {
  // The checker's search budget per key. Its memo holds a bitset of the key's operations per
  // state seen, so the budget bounds memory too: 2M states of a 4000-operation key are ~1 GB. A
  // linearizable history is found in about one step per operation; only a violation (or a
  // history thick with unknown writes) searches long.
  size_t max_steps = 2'000'000;
};

// Reads a history file and checks it per key. The JSON: operations (as checked), ok / fail /
// unknown counts, reads, writes, final_reads, keys (per key: operations, ok, why), violations,
// inconclusive (keys whose search ran out of budget), check_ms. A history that does not parse is an
// error, not a verdict.
absl::StatusOr<nlohmann::json> CheckHistory(const std::string& path, const CheckOptions& options);

}  // namespace exa::raft_history
