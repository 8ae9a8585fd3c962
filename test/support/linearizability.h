// A linearizability checker for a versioned key-value store's history, per key (Wing & Gong's
// search with Lowe's memoization, as Porcupine and Knossos do it): is there an order of the
// operations, each placed between its invocation and its response, in which every answer is
// what a single copy of the store would have given?
//
// The model: a key holds a value or nothing, and the version of the write that set it. Values
// written must be unique per history (the checker maps versions to values through them).
// Operations whose outcome is unknown (a timeout, a lost leader) may have taken effect at any
// point after their invocation, or not at all; operations that failed definitely are left out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace exa::testing {

struct KvOperation {
  enum class Kind { kPut, kDelete, kRead };
  Kind kind = Kind::kRead;
  std::string key;
  std::optional<std::string> value;          // kPut: written; kRead: what it returned
  std::optional<uint64_t> expected_version;  // kPut / kDelete: the condition (0: absent)
  bool unknown = false;                      // outcome unknown (no response)
  bool conflict = false;                     // refused: the condition did not hold
  uint64_t version = 0;                      // kPut ok: the version it got; kRead: the version read
  int64_t invoke = 0;                        // invocation time
  int64_t response = 0;                      // response time (ignored when unknown)
};

struct LinearizabilityResult {
  bool ok = true;
  std::string key;      // the first key without a linearization
  std::string message;  // what could not be ordered
  size_t operations = 0;
};

// Checks every key's operations; gives up on a key after `max_steps` search steps (reported as
// not ok, with a message saying so).
LinearizabilityResult CheckLinearizable(const std::vector<KvOperation>& history,
                                        size_t max_steps = 20'000'000);

}  // namespace exa::testing
