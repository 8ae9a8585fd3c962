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

}  // namespace exa::membership
