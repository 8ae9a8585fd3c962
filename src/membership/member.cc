#include "membership/member.h"

namespace exa::membership {

std::string_view MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kAlive:
      return "alive";
    case MemberState::kSuspect:
      return "suspect";
    case MemberState::kDead:
      return "dead";
    case MemberState::kLeft:
      return "left";
  }
  return "unknown";
}

std::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kJoin:
      return "join";
    case EventType::kUpdate:
      return "update";
    case EventType::kSuspect:
      return "suspect";
    case EventType::kAlive:
      return "alive";
    case EventType::kDead:
      return "dead";
    case EventType::kLeave:
      return "leave";
  }
  return "unknown";
}

std::string_view AddressHost(std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return address;
  // "[::1]:7946" keeps its brackets; a bare IPv6 literal without a port has no ']' before it.
  size_t bracket = address.rfind(']');
  if (bracket == std::string_view::npos && address.find(':') != colon) return address;
  return address.substr(0, colon);
}

}  // namespace exa::membership
