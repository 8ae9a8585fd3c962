#include "support/linearizability.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_set>

namespace exa::testing {
namespace {

struct State {
  std::optional<std::string> value;
  std::optional<uint64_t> version;  // nullopt: not known from the history
};

struct Event {
  int op = 0;
  bool is_call = true;
  int64_t time = 0;
  Event* prev = nullptr;
  Event* next = nullptr;
  Event* match = nullptr;  // a call's return
};

class KeyChecker {
 public:
  KeyChecker(std::vector<const KvOperation*> ops, const std::map<std::string, uint64_t>& versions)
      : ops_(std::move(ops)), versions_(versions), bits_((ops_.size() + 63) / 64, 0) {}

  // true: linearizable; false with `*why`.
  bool Check(size_t max_steps, std::string* why);

 private:
  bool Holds(const State& s, uint64_t expected) const {
    if (expected == 0) return !s.value.has_value();
    return s.value.has_value() && (!s.version || *s.version == expected);
  }
  bool Fails(const State& s, uint64_t expected) const {
    if (expected == 0) return s.value.has_value();
    return !s.value.has_value() || !s.version || *s.version != expected;
  }
  std::optional<uint64_t> VersionOf(const std::string& value) const {
    auto it = versions_.find(value);
    if (it == versions_.end()) return std::nullopt;
    return it->second;
  }
  // The state after `op`, or nullopt when `op` cannot happen in `s`.
  std::optional<State> Step(const State& s, const KvOperation& op) const;
  std::string Memo(const State& s) const;
  void Lift(Event* call);
  void Unlift(Event* call);

  std::vector<const KvOperation*> ops_;
  const std::map<std::string, uint64_t>& versions_;
  std::vector<uint64_t> bits_;
};

std::optional<State> KeyChecker::Step(const State& s, const KvOperation& op) const {
  if (op.kind == KvOperation::Kind::kRead) {
    if (s.value != op.value) return std::nullopt;
    if (s.value && op.version != 0 && s.version && *s.version != op.version) return std::nullopt;
    return s;
  }
  bool conditional = op.expected_version.has_value();
  if (op.conflict) {
    if (!Fails(s, *op.expected_version)) return std::nullopt;
    return s;
  }
  if (conditional && !Holds(s, *op.expected_version)) {
    if (op.unknown) return s;  // an unknown write whose condition failed changed nothing
    return std::nullopt;
  }
  State next;
  if (op.kind == KvOperation::Kind::kPut) {
    next.value = op.value;
    next.version = op.unknown ? VersionOf(*op.value) : std::optional<uint64_t>(op.version);
  }
  return next;
}

std::string KeyChecker::Memo(const State& s) const {
  std::string m(reinterpret_cast<const char*>(bits_.data()), bits_.size() * sizeof(uint64_t));
  m += s.value ? "v" + *s.value : "-";
  m += '|';
  m += s.version ? std::to_string(*s.version) : "?";
  return m;
}

void KeyChecker::Lift(Event* call) {
  call->prev->next = call->next;
  if (call->next) call->next->prev = call->prev;
  Event* ret = call->match;
  ret->prev->next = ret->next;
  if (ret->next) ret->next->prev = ret->prev;
}

void KeyChecker::Unlift(Event* call) {
  Event* ret = call->match;
  ret->prev->next = ret;
  if (ret->next) ret->next->prev = ret;
  call->prev->next = call;
  if (call->next) call->next->prev = call;
}

bool KeyChecker::Check(size_t max_steps, std::string* why) {
  std::vector<Event> events(ops_.size() * 2);
  std::vector<Event*> order;
  for (size_t i = 0; i < ops_.size(); ++i) {
    Event& call = events[2 * i];
    Event& ret = events[2 * i + 1];
    call = {static_cast<int>(i), true, ops_[i]->invoke};
    ret = {static_cast<int>(i), false,
           ops_[i]->unknown ? std::numeric_limits<int64_t>::max() : ops_[i]->response};
    call.match = &ret;
    order.push_back(&call);
    order.push_back(&ret);
  }
  // Calls before returns at equal times: such operations count as concurrent.
  std::stable_sort(order.begin(), order.end(), [](const Event* a, const Event* b) {
    if (a->time != b->time) return a->time < b->time;
    return a->is_call && !b->is_call;
  });
  Event head;
  Event* prev = &head;
  for (Event* e : order) {
    prev->next = e;
    e->prev = prev;
    prev = e;
  }
  std::unordered_set<std::string> seen;
  std::vector<std::pair<Event*, State>> stack;
  State state;
  Event* entry = head.next;
  size_t steps = 0;
  while (head.next != nullptr) {
    if (++steps > max_steps) {
      *why = "search gave up after " + std::to_string(max_steps) + " steps";
      return false;
    }
    if (entry->is_call) {
      std::optional<State> next = Step(state, *ops_[entry->op]);
      if (next) {
        bits_[entry->op / 64] |= 1ull << (entry->op % 64);
        if (seen.insert(Memo(*next)).second) {
          stack.emplace_back(entry, state);
          state = *next;
          Lift(entry);
          entry = head.next;
          continue;
        }
        bits_[entry->op / 64] &= ~(1ull << (entry->op % 64));
      }
      entry = entry->next;
      continue;
    }
    if (stack.empty()) {
      const KvOperation& op = *ops_[entry->op];
      *why = "no order explains the operation answered at t=" + std::to_string(op.response);
      return false;
    }
    auto [call, before] = stack.back();
    stack.pop_back();
    state = before;
    bits_[call->op / 64] &= ~(1ull << (call->op % 64));
    Unlift(call);
    entry = call->next;
  }
  return true;
}

}  // namespace

LinearizabilityResult CheckLinearizable(const std::vector<KvOperation>& history, size_t max_steps) {
  std::map<std::string, uint64_t> versions;  // value → the version that wrote it, where seen
  std::map<std::string, std::vector<const KvOperation*>> by_key;
  for (const KvOperation& op : history) {
    if (op.kind == KvOperation::Kind::kPut && !op.unknown && !op.conflict && op.value) {
      versions[*op.value] = op.version;
    }
    if (op.kind == KvOperation::Kind::kRead && op.value && op.version != 0) {
      versions[*op.value] = op.version;
    }
    by_key[op.key].push_back(&op);
  }
  LinearizabilityResult result;
  for (auto& [key, ops] : by_key) {
    result.operations += ops.size();
    KeyChecker checker(ops, versions);
    std::string why;
    if (!checker.Check(max_steps, &why)) {
      result.ok = false;
      result.key = key;
      result.message = why;
      return result;
    }
  }
  return result;
}

}  // namespace exa::testing
