// exaserve.v1.Admin: what `exaserve-cli status` asks a node. A thin adapter: proto stays here.
#pragma once

#include <functional>

#include "exaserve/v1/admin.grpc.pb.h"

namespace exa::daemon {

class AdminService final : public exaserve::v1::Admin::CallbackService {
 public:
  // `fill` writes the node's current status; it must be cheap and thread-safe.
  explicit AdminService(std::function<void(exaserve::v1::StatusResponse*)> fill)
      : fill_(std::move(fill)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const exaserve::v1::StatusRequest* request,
                                   exaserve::v1::StatusResponse* response) override {
    fill_(response);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  std::function<void(exaserve::v1::StatusResponse*)> fill_;
};

}  // namespace exa::daemon
