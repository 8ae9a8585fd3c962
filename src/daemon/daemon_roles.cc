// The daemon's elected control roles (docs/architecture.md#roles): following what the election
// names this node, and which members hold a role. Split from daemon.cc; the Daemon class is one.
#include <thread>

#include "common/logging.h"
#include "common/strings.h"
#include "daemon/daemon.h"
#include "daemon/observer_role.h"

namespace exa::daemon {

bool Daemon::ElectableControlRoles() const {
  return options_.node.roles == std::vector<std::string>{"auto"} && !options_.network.join.empty();
}

// An elected observer observes while the election names it and stops when it no longer does
// (the other observer, or a new one, carries on); never once the node drains.
void Daemon::FollowElectedObserver() {
  if (!observer_ || !ElectableControlRoles() || state_ != State::kReady) return;
  const bool elected = HasRole(CurrentRoles(), "observer");
  if (elected == observer_->running()) return;
  if (elected) {
    if (absl::Status s = observer_->Start(); !s.ok()) {
      EXA_LOG_ERROR("observer", "elected but cannot observe", {{"error", ToStd(s.message())}});
      return;
    }
    EXA_LOG_INFO("observer", "elected observer: observing");
  } else {
    observer_->Stop();
    EXA_LOG_INFO("observer", "no longer an elected observer: stopped");
  }
}

// An elected scheduler schedules while the election names it and stops when it no longer does
// (RunsScheduler then counts whoever the view names instead). Start and Stop run on a thread of
// their own: stopping waits for the control loop's calls to nodes (up to scheduler.rpc_timeout),
// which must not hold up an io thread. A change waits for the previous one to finish.
void Daemon::FollowElectedScheduler() {
  if (!scheduler_ || !ElectableControlRoles()) return;
  absl::MutexLock lock(&scheduler_switch_mu_);
  if (state_ != State::kReady || scheduler_switching_.load()) return;
  const bool elected = HasRole(CurrentRoles(), "scheduler");
  if (elected == scheduler_->running()) return;
  if (scheduler_switch_.joinable()) scheduler_switch_.join();  // finished: switching is false
  scheduler_switching_ = true;
  scheduler_switch_ = std::thread([this, elected] {
    if (elected) {
      scheduler_->Start();
      EXA_LOG_INFO("scheduler", "elected scheduler: scheduling");
    } else {
      scheduler_->Stop();
      EXA_LOG_INFO("scheduler", "no longer an elected scheduler: stopped");
    }
    scheduler_switching_ = false;
  });
}

void Daemon::JoinSchedulerSwitch() {
  absl::MutexLock lock(&scheduler_switch_mu_);
  if (scheduler_switch_.joinable()) scheduler_switch_.join();
}

// A member runs the scheduler service: this node while its control loop runs; another when it is
// pinned to the role or the election (this node's view of it) names it.
bool Daemon::RunsScheduler(const membership::Member& m) const {
  if (m.id == node_id_) return scheduler_ != nullptr && scheduler_->running();
  return HoldsRole(m, "scheduler");
}

bool Daemon::HoldsRole(const membership::Member& m, std::string_view role) const {
  if (HasRole(m.metadata.roles, role)) return true;
  absl::MutexLock lock(&roles_mu_);
  auto it = assignment_.find(m.id);
  return it != assignment_.end() && HasRole(it->second.Names(), role);
}

// Each gateway enforces its share of every API key's rate limits (docs/operations.md#rate-limits).
// Suspected members count, as in the election: they may still serve.
int Daemon::LiveGateways() const {
  int n = 0;
  for (const membership::Member& m : gossip_->Members()) {
    const bool live =
        m.state == membership::MemberState::kAlive || m.state == membership::MemberState::kSuspect;
    if (live && HoldsRole(m, "gateway")) ++n;
  }
  return std::max(1, n);
}

}  // namespace exa::daemon
