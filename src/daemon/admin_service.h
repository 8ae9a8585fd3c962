// exaserve.v1.Admin: what exaserve-cli asks a node. A thin adapter: proto stays here and the
// daemon supplies the answers through callbacks, which must be cheap and thread-safe.
#pragma once

#include <functional>
#include <string_view>

#include "exaserve/v1/admin.grpc.pb.h"
#include "gateway/inference_service.h"

namespace exa::daemon {

struct AdminCallbacks {
  std::function<void(exaserve::v1::StatusResponse*)> status;
  std::function<void(exaserve::v1::MembersResponse*)> members;
  std::function<grpc::Status(const exaserve::v1::GossipKeyRequest&,
                             exaserve::v1::GossipKeyResponse*)>
      gossip_key;
  std::function<grpc::Status(const exaserve::v1::LabelReplicasRequest&,
                             exaserve::v1::LabelReplicasResponse*)>
      label_replicas;
  std::function<grpc::Status(const exaserve::v1::RoutesRequest&, exaserve::v1::RoutesResponse*)>
      routes;
  // Runs the GPU burn-in on this node now (blocking, a few seconds) and re-taints it.
  std::function<grpc::Status(exaserve::v1::BurnInResponse*)> burn_in;
  // The observer's alerts; FAILED_PRECONDITION on a node that is not an observer.
  std::function<grpc::Status(exaserve::v1::AlertsResponse*)> alerts;
  // Checks the caller's `authorization` metadata for operations that change the node.
  std::function<grpc::Status(std::string_view authorization)> authorize_admin;
};

class AdminService final : public exaserve::v1::Admin::CallbackService {
 public:
  explicit AdminService(AdminCallbacks callbacks) : callbacks_(std::move(callbacks)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const exaserve::v1::StatusRequest*,
                                   exaserve::v1::StatusResponse* response) override {
    callbacks_.status(response);
    return Done(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Members(grpc::CallbackServerContext* context,
                                    const exaserve::v1::MembersRequest*,
                                    exaserve::v1::MembersResponse* response) override {
    callbacks_.members(response);
    return Done(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* GossipKey(grpc::CallbackServerContext* context,
                                      const exaserve::v1::GossipKeyRequest* request,
                                      exaserve::v1::GossipKeyResponse* response) override {
    if (request->op() != exaserve::v1::GossipKeyRequest::OP_LIST) {
      grpc::Status s = callbacks_.authorize_admin(gateway::AuthorizationMetadata(context));
      if (!s.ok()) return Done(context, s);
    }
    return Done(context, callbacks_.gossip_key(*request, response));
  }

  grpc::ServerUnaryReactor* LabelReplicas(grpc::CallbackServerContext* context,
                                          const exaserve::v1::LabelReplicasRequest* request,
                                          exaserve::v1::LabelReplicasResponse* response) override {
    grpc::Status s = callbacks_.authorize_admin(gateway::AuthorizationMetadata(context));
    if (!s.ok()) return Done(context, s);
    return Done(context, callbacks_.label_replicas(*request, response));
  }

  grpc::ServerUnaryReactor* Routes(grpc::CallbackServerContext* context,
                                   const exaserve::v1::RoutesRequest* request,
                                   exaserve::v1::RoutesResponse* response) override {
    if (request->op() != exaserve::v1::RoutesRequest::OP_LIST) {
      grpc::Status s = callbacks_.authorize_admin(gateway::AuthorizationMetadata(context));
      if (!s.ok()) return Done(context, s);
    }
    return Done(context, callbacks_.routes(*request, response));
  }

  grpc::ServerUnaryReactor* BurnIn(grpc::CallbackServerContext* context,
                                   const exaserve::v1::BurnInRequest*,
                                   exaserve::v1::BurnInResponse* response) override {
    grpc::Status s = callbacks_.authorize_admin(gateway::AuthorizationMetadata(context));
    if (!s.ok()) return Done(context, s);
    return Done(context, callbacks_.burn_in(response));
  }

  grpc::ServerUnaryReactor* Alerts(grpc::CallbackServerContext* context,
                                   const exaserve::v1::AlertsRequest*,
                                   exaserve::v1::AlertsResponse* response) override {
    return Done(context, callbacks_.alerts(response));
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, grpc::Status s) {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(std::move(s));
    return reactor;
  }

  AdminCallbacks callbacks_;
};

}  // namespace exa::daemon
