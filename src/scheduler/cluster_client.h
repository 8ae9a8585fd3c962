// The scheduler's outgoing calls (docs/architecture.md#flows): node agents are polled for their
// replicas (Node.ListReplicas) and commanded (Node.StartReplica / StopReplica / StageModel,
// Admin.LabelReplicas), and peer schedulers get the spec store's Raft frames
// (Scheduler.Replicate). Every call has a deadline and carries the node token; channels are
// reused per address. Commands carry the Raft term of the scheduler that sends them, and node
// agents refuse a term lower than one they obeyed (node/term_fence.h).
//
// Thread safety: thread-safe. Callbacks run on gRPC's threads; the owner must outlive them
// (WaitIdle before destruction).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "exaserve/v1/node.pb.h"
#include "membership/member.h"
#include "scheduler/control_loop.h"

namespace exa::scheduler {

// "host:port" of a member's gRPC server; empty when it gossips none.
std::string MemberGrpcAddress(const membership::Member& m);
// Alive or suspected: not yet confirmed dead.
bool Live(const membership::Member& m);

// A node agent's answer as the control loop takes it.
NodeReport ReportFromProto(const std::string& node, const exaserve::v1::ListReplicasResponse& r);

class ClusterClient {
 public:
  ClusterClient(std::string self, absl::Duration rpc_timeout, std::string token);

  // Asks every live member that offers devices for its replicas, in parallel, and waits for every
  // answer (each call has a deadline). Those that answered; `addresses` gets every polled node's.
  std::vector<NodeReport> Poll(const std::vector<membership::Member>& members,
                               std::map<std::string, std::string>* addresses);

  // Called once per command that failed: the action, a description ("start x-0 on n3"), why.
  using Failed =
      std::function<void(const NodeAction&, const std::string& what, const std::string& error)>;
  // Sends the relabels and the actions (those whose node has no address are skipped: the next
  // step retries) without waiting for them.
  void Execute(const std::vector<NodeAction>& actions, const std::vector<Relabel>& relabels,
               const std::map<std::string, std::string>& addresses, uint64_t term, Failed failed);

  // One Raft frame to the peer scheduler at `address`; Raft sends again when it is lost.
  void SendFrame(const std::string& address, std::string frame);

  // Commands sent and not yet answered.
  int commands_in_flight() const { return commands_.load(); }
  // Waits until no call is in flight, at most `limit`.
  void WaitIdle(absl::Duration limit);

 private:
  std::shared_ptr<grpc::Channel> ChannelFor(const std::string& address);
  void Prepare(grpc::ClientContext& context) const;
  void SendRelabels(const std::vector<Relabel>& relabels,
                    const std::map<std::string, std::string>& addresses);
  void SendAction(const NodeAction& a, const std::string& address, uint64_t term,
                  const Failed& failed);

  const std::string self_;
  const absl::Duration rpc_timeout_;
  const std::string token_;
  std::atomic<int> commands_{0};
  std::atomic<int> frames_{0};
  absl::Mutex channels_mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(channels_mu_);
};

}  // namespace exa::scheduler
