// The scheduler service's side of the spec store (scheduler_service.h): writes and reads on
// behalf of RPCs, their outcomes, and the Raft frames to and from peer schedulers.
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/chars.h"
#include "common/logging.h"
#include "common/strings.h"
#include "net/grpc_status.h"
#include "nlohmann/json.hpp"
#include "scheduler/rpc_reply.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/spec_versions.h"

namespace exa::scheduler {

namespace pb = exaserve::v1;
using nlohmann::json;

// Peers send what they stored themselves; this guards the store against a broken or hostile
// sender.
absl::Status ValidateReplicated(const pb::ReplicateRequest& m, absl::Time now) {
  constexpr absl::Duration kMaxReplicatedClockLead = absl::Hours(1);
  const int64_t latest_us = absl::ToUnixMicros(now + kMaxReplicatedClockLead);
  for (const pb::StoreRecordProto& r : m.records()) {
    const std::string_view key = r.key();
    const auto has = [&](std::string_view prefix) { return key.rfind(prefix, 0) == 0; };
    if (!IsStoreKey(key)) {
      return absl::InvalidArgumentError(StrCat("records: key \"", key.substr(0, 80),
                                               "\": not a kind of record the spec store keeps"));
    }
    if (r.version().wall_us() > latest_us) {
      return absl::InvalidArgumentError(StrCat("records: key \"", key.substr(0, 80), "\": version ",
                                               r.version().wall_us(), " us is more than ",
                                               absl::FormatDuration(kMaxReplicatedClockLead),
                                               " ahead of this scheduler's clock"));
    }
    if (r.deleted()) continue;
    if (FindInvalidUtf8(r.value()) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("records: key \"", key.substr(0, 80), "\": the value is not UTF-8"));
    }
    if (has(kSpecPrefix)) {
      auto specs = ParseSpecs(r.value(), key);
      if (!specs.ok()) {
        return absl::InvalidArgumentError(StrCat("records: ", specs.status().message()));
      }
    } else if (!json::parse(r.value(), nullptr, false).is_object()) {
      return absl::InvalidArgumentError(
          StrCat("records: key \"", key.substr(0, 80), "\": the value is not a JSON object"));
    }
  }
  return absl::OkStatus();
}

void SchedulerService::FlushLocked() {
  std::vector<std::pair<std::shared_ptr<WriteWaiter>, grpc::Status>> done;
  std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::Status>> reads;
  for (const WriteOutcome& o : store_->TakeOutcomes()) {
    if (auto r = readers_.find(o.id); r != readers_.end()) {
      ReadWaiter read = std::move(r->second);
      readers_.erase(r);
      if (!o.ok) {
        reads.emplace_back(read.reactor, grpc::Status(grpc::UNAVAILABLE, o.error));
      } else if (std::optional<grpc::Status> answer = read.then(read.reactor)) {
        reads.emplace_back(read.reactor, *answer);
      }
      continue;
    }
    auto it = waiters_.find(o.id);
    if (it == waiters_.end()) continue;
    std::shared_ptr<WriteWaiter> w = it->second;
    waiters_.erase(it);
    w->ids.erase(o.id);
    if (!o.ok && w->failure.ok()) w->failure = WriteFailure(o);
    if (!w->ids.empty()) continue;
    done.emplace_back(w, w->failure);
  }
  // Taken after the answers: writes a read's answer started go out now.
  std::vector<StoreFrame> frames = store_->TakeFrames();
  mu_.Unlock();
  Send(std::move(frames));
  for (auto& [w, status] : done) w->reactor->Finish(status);
  for (auto& [reactor, status] : reads) reactor->Finish(Clamped(status));
  mu_.Lock();
}

grpc::ServerUnaryReactor* SchedulerService::ReadThen(grpc::CallbackServerContext* context,
                                                     std::function<grpc::Status()> answer) {
  return ReadThenWrite(context, [answer = std::move(answer)](grpc::ServerUnaryReactor*) {
    return std::optional<grpc::Status>(answer());
  });
}

grpc::ServerUnaryReactor* SchedulerService::ReadThenWrite(grpc::CallbackServerContext* context,
                                                          AfterRead then) {
  absl::ReleasableMutexLock lock(&mu_);
  // The store gives up a little before the caller does, so the caller hears why.
  const absl::Time now = absl::Now();
  const absl::Time deadline = absl::FromChrono(context->deadline()) - absl::Milliseconds(250);
  std::optional<uint64_t> id = store_->Read(now, std::max(deadline, now));
  if (!id) {
    lock.Release();
    return Finish(context, grpc::Status(grpc::RESOURCE_EXHAUSTED, "too many reads in flight"));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  readers_[*id] = {reactor, std::move(then)};
  FlushLocked();
  return reactor;
}

void SchedulerService::Send(std::vector<StoreFrame> frames) {
  if (frames.empty()) return;
  std::map<std::string, std::string> addresses;
  for (const membership::Member& m : env_.members()) addresses[m.id] = MemberGrpcAddress(m);
  for (StoreFrame& f : frames) {
    auto a = addresses.find(f.to);
    if (a == addresses.end() || a->second.empty()) continue;  // Raft sends again
    client_.SendFrame(a->second, std::move(f.bytes));
  }
}

void SchedulerService::WriteLocked(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
    grpc::ServerUnaryReactor* reactor, const std::map<std::string, uint64_t>& expected) {
  if (std::optional<grpc::Status> refused = StartWritesLocked(writes, reactor, expected)) {
    mu_.Unlock();
    reactor->Finish(*refused);
    mu_.Lock();
    return;
  }
  FlushLocked();
}

std::optional<grpc::Status> SchedulerService::StartWritesLocked(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
    grpc::ServerUnaryReactor* reactor, const std::map<std::string, uint64_t>& expected) {
  auto waiter = std::make_shared<WriteWaiter>();
  waiter->reactor = reactor;
  absl::Time now = absl::Now();
  for (std::vector<consensus::KvOp>& ops : StoreTransactions(writes, expected)) {
    const std::string key = ops.front().key;
    std::optional<uint64_t> id = store_->Transact(now, std::move(ops));
    if (!id) {
      waiter->failure =
          grpc::Status(grpc::RESOURCE_EXHAUSTED,
                       StrCat("the spec store refused ", key, " (too many in flight)"));
      continue;
    }
    waiter->ids.insert(*id);
    waiters_[*id] = waiter;
  }
  if (waiter->ids.empty()) return waiter->failure;
  return std::nullopt;
}

grpc::ServerUnaryReactor* SchedulerService::Replicate(grpc::CallbackServerContext* context,
                                                      const pb::ReplicateRequest* request,
                                                      pb::ReplicateResponse*) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (auto s = Authorize(context, "Scheduler.Replicate"); !s.ok()) return Finish(context, s);
  if (request->from().empty() || request->from().size() > 255) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, "from: 1 to 255 bytes, required"));
  }
  if (request->type() != pb::ReplicateRequest::RAFT) {
    return Finish(context,
                  grpc::Status(grpc::FAILED_PRECONDITION,
                               "type: this scheduler keeps its specs in a Raft log and "
                               "takes RAFT frames only (the sender runs an older version)"));
  }
  const absl::Time now = absl::Now();
  if (absl::Status s = ValidateReplicated(*request, now); !s.ok()) {
    EXA_LOG_WARN("scheduler", "replicated records refused",
                 {{"from", request->from().substr(0, 80)}, {"error", std::string(s.message())}});
    return Finish(context, net::StatusToGrpc(s));
  }
  absl::ReleasableMutexLock lock(&mu_);
  if (absl::Status s = store_->Handle(now, request->from(), request->frame()); !s.ok()) {
    EXA_LOG_WARN("scheduler", "spec store frame refused",
                 {{"from", request->from().substr(0, 80)}, {"error", std::string(s.message())}});
    lock.Release();
    return Finish(context, net::StatusToGrpc(s));
  }
  FlushLocked();
  return Finish(context, grpc::Status::OK);
}

}  // namespace exa::scheduler
