// The roles a node can hold (docs/architecture.md#roles) and a small set type for them.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exa::cluster {

enum class Role : uint8_t {
  kInference = 0,
  kGateway = 1,
  kScheduler = 2,
  kStorage = 3,
  kObserver = 4
};
inline constexpr std::array<Role, 5> kAllRoles = {
    Role::kInference, Role::kGateway, Role::kScheduler, Role::kStorage, Role::kObserver};

std::string_view RoleName(Role role);
// "inference", "gateway", ...; nullopt for anything else (including "auto").
std::optional<Role> ParseRole(std::string_view name);

class RoleSet;
// Pinned roles from a node's metadata; "auto" and unknown names are ignored.
RoleSet ParseRoleList(const std::vector<std::string>& names);

class RoleSet {
 public:
  RoleSet() = default;
  RoleSet(std::initializer_list<Role> roles) {
    for (Role r : roles) Add(r);
  }
  static RoleSet All() {
    RoleSet s;
    for (Role r : kAllRoles) s.Add(r);
    return s;
  }
  void Add(Role r) { bits_ |= Bit(r); }
  void Remove(Role r) { bits_ &= static_cast<uint8_t>(~Bit(r)); }
  bool Has(Role r) const { return (bits_ & Bit(r)) != 0; }
  bool empty() const { return bits_ == 0; }
  // Roles other than inference.
  bool HasControlRole() const { return (bits_ & ~Bit(Role::kInference)) != 0; }
  bool operator==(const RoleSet&) const = default;
  auto operator<=>(const RoleSet&) const = default;
  std::vector<std::string> Names() const;
  // "gateway,scheduler" (for logs and the CLI).
  std::string ToString() const;

 private:
  static uint8_t Bit(Role r) { return static_cast<uint8_t>(1u << static_cast<uint8_t>(r)); }
  uint8_t bits_ = 0;
};

}  // namespace exa::cluster
