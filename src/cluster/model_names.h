// Model and version names: one rule for every module that stores, places or routes by them. The
// weights store names directories after them (weights/layout.h) and InferenceReplica specs name
// the version they serve (scheduler/spec.h); both sit above cluster/, so the rule lives here
// (docs/architecture.md#dependencies).
//
// Pure; thread-compatible.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"

namespace exa::cluster {

inline constexpr size_t kMaxModelNameBytes = 128;

// The names the weights layout (weights/layout.h) gives the files beside a version's directory
// ROOT/NAME/VERSION, and the staging directory of a publish. ".tmp" ends the temporary name of
// every file written atomically there. They are defined with the version rule that reserves them.
inline constexpr std::string_view kManifestSuffix = ".manifest.json";
inline constexpr std::string_view kStateSuffix = ".state";
inline constexpr std::string_view kPinSuffix = ".pinned";
inline constexpr std::string_view kLockSuffix = ".lock";
inline constexpr std::string_view kPublishingSuffix = ".publishing";
inline constexpr std::string_view kReservedVersionSuffixes[] = {
    kManifestSuffix, kStateSuffix, kPinSuffix, kLockSuffix, kPublishingSuffix, ".tmp"};

// A model or version name: 1-128 of [A-Za-z0-9._-], not starting with '.'. `field` names it in
// the error.
absl::Status ValidateModelName(std::string_view field, std::string_view name);
// A model version: a name (above) that does not end in one of kReservedVersionSuffixes, so that
// no version's files can be another version's.
absl::Status ValidateModelVersion(std::string_view field, std::string_view version);

}  // namespace exa::cluster
