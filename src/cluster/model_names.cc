#include "cluster/model_names.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"

namespace exa::cluster {
namespace {

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

absl::Status ValidateModelName(std::string_view field, std::string_view name) {
  if (name.empty() || name.size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(StrCat(field, " \"", name.substr(0, kMaxModelNameBytes),
                                             "\": expected 1-", kMaxModelNameBytes, " characters"));
  }
  if (name[0] == '.' || !std::all_of(name.begin(), name.end(), NameChar)) {
    return absl::InvalidArgumentError(StrCat(field, " \"", name,
                                             "\": expected letters, digits, '.', '_' or '-', ",
                                             "not starting with '.'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateModelVersion(std::string_view field, std::string_view version) {
  EXA_RETURN_IF_ERROR(ValidateModelName(field, version));
  for (std::string_view suffix : kReservedVersionSuffixes) {
    if (version.ends_with(suffix)) {
      return absl::InvalidArgumentError(
          StrCat(field, " \"", version, "\": must not end in \"", suffix,
                 "\" (the weights layout's name for files beside a version)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace exa::cluster
