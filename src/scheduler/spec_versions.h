// Optimistic concurrency in the scheduler's API (docs/architecture.md#consistency): every record
// the API shows carries its resource version — the index of the Raft log entry that last wrote
// it — and Apply / DeleteSpec may name the version the caller read. The spec store checks it when
// the write is applied (consensus::KvState), so two operators editing the same spec cannot
// silently overwrite each other: the second is refused with ABORTED, naming the spec and both
// versions, and reads again. Without a named version the last writer wins, as before.
//
// These are the pieces SchedulerService's handlers use. Thread safety: the functions are pure.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "consensus/kv_state.h"
#include "exaserve/v1/scheduler.pb.h"
#include "scheduler/raft_spec_store.h"
#include "scheduler/spec.h"

namespace exa::scheduler {

// A store record's resource version (the Raft index that wrote it); 0 for no record, which is
// also what a caller names for "must not exist yet".
uint64_t ResourceVersion(const StoreRecord* record);

// The version an Apply names per spec name: request.resource_versions merged with the
// documents' metadata.resourceVersion (`from_yaml`, from ParseSpecs). INVALID_ARGUMENT, naming
// the spec, when the request names a spec the YAML does not hold or the two disagree.
absl::StatusOr<ResourceVersions> NamedVersions(const exaserve::v1::ApplyRequest& request,
                                               const std::vector<InferenceReplicaSpec>& specs,
                                               ResourceVersions from_yaml);

// The store transactions for `writes` (key → value; nullopt deletes). With no `expected`
// version (key → the version the caller read), one per write, as writes always went. When any
// is named, one transaction of them all: a stale version refuses every write of the call, so a
// spec and the rollout state deleted with it go together or not at all.
std::vector<std::vector<consensus::KvOp>> StoreTransactions(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
    const std::map<std::string, uint64_t>& expected);

// What the client hears for a stale version: ABORTED, naming the spec (or the store key of
// another record) and both versions.
grpc::Status ConflictStatus(const VersionConflict& conflict);

// What the client hears for a refused write: ConflictStatus for a stale version; otherwise
// UNAVAILABLE with the store's reason (no leader, no outcome in time: it may still land).
grpc::Status WriteFailure(const WriteOutcome& outcome);

}  // namespace exa::scheduler
