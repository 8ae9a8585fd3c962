// A model or version name as the weights store and the node cache take it: one path component
// (<cache>/NAME/VERSION), so a name can never point outside the cache.
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "common/chars.h"

namespace exa::node {

inline bool StoreNameOk(const std::string& name) {
  return !name.empty() && name.size() <= 128 && name.find('/') == std::string::npos &&
         name != "." && name != ".." && !HasSpaceOrControl(name);
}

}  // namespace exa::node
