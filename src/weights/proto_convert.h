// Manifest <-> exaserve.v1 messages. Only the gRPC adapters (service and client) include this
// (docs/architecture.md#module-map rule 2: proto stays at the edge).
#pragma once

#include "absl/status/statusor.h"
#include "exaserve/v1/weights.pb.h"
#include "weights/manifest.h"

namespace exa::weights {

void ToProto(const Manifest& manifest, exaserve::v1::Manifest* out);
// Converts and validates: a peer's manifest is input like any other.
absl::StatusOr<Manifest> FromProto(const exaserve::v1::Manifest& manifest);

}  // namespace exa::weights
