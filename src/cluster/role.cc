#include "cluster/role.h"

namespace exa::cluster {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kInference:
      return "inference";
    case Role::kGateway:
      return "gateway";
    case Role::kScheduler:
      return "scheduler";
    case Role::kStorage:
      return "storage";
    case Role::kObserver:
      return "observer";
  }
  return "unknown";
}

std::optional<Role> ParseRole(std::string_view name) {
  for (Role r : kAllRoles) {
    if (RoleName(r) == name) return r;
  }
  return std::nullopt;
}

RoleSet ParseRoleList(const std::vector<std::string>& names) {
  RoleSet out;
  for (const std::string& name : names) {
    if (std::optional<Role> r = ParseRole(name)) out.Add(*r);
  }
  return out;
}

std::vector<std::string> RoleSet::Names() const {
  std::vector<std::string> out;
  for (Role r : kAllRoles) {
    if (Has(r)) out.emplace_back(RoleName(r));
  }
  return out;
}

std::string RoleSet::ToString() const {
  std::string out;
  for (const std::string& n : Names()) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

}  // namespace exa::cluster
