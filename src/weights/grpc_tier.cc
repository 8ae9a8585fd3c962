#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>

#include "common/status.h"
#include "common/strings.h"
#include "exaserve/v1/weights.grpc.pb.h"
#include "weights/proto_convert.h"
#include "weights/tier.h"

namespace exa::weights {
namespace {

absl::Status FromGrpc(const grpc::Status& s, std::string_view who) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      StrCat(who, ": ", s.error_message()));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
}

class GrpcTier final : public Tier {
 public:
  GrpcTier(std::string label, std::string address, GrpcTierOptions options)
      : name_(StrCat(label, " ", address)) {
    for (int i = 0; i < std::max(1, options.connections); ++i) {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(options.max_message_bytes);
      // Each channel its own subchannel pool, hence its own TCP connection.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("exaserve.channel_index", i);
      auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(exaserve::v1::Weights::NewStub(channel));
    }
  }

  const std::string& name() const override { return name_; }

  absl::StatusOr<std::vector<ModelRef>> ListModels(absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    exaserve::v1::ListModelsResponse resp;
    grpc::Status s = Stub().ListModels(&ctx, exaserve::v1::ListModelsRequest(), &resp);
    if (!s.ok()) return FromGrpc(s, name_);
    std::vector<ModelRef> out;
    for (const auto& m : resp.models()) out.push_back({m.name(), m.version(), m.manifest_digest()});
    return out;
  }

  absl::StatusOr<Manifest> GetManifest(const std::string& name, const std::string& version,
                                       absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    exaserve::v1::GetManifestRequest req;
    req.set_name(name);
    req.set_version(version);
    exaserve::v1::Manifest resp;
    grpc::Status s = Stub().GetManifest(&ctx, req, &resp);
    if (!s.ok()) return FromGrpc(s, name_);
    auto m = FromProto(resp);
    if (!m.ok()) return Annotate(m.status(), StrCat(name_, " sent a bad manifest"));
    if (m->name != name || (!version.empty() && m->version != version)) {
      return absl::DataLossError(
          StrCat(name_, " answered with ", m->name, ":", m->version, " for ", name, ":", version));
    }
    return m;
  }

  absl::Status FetchChunk(const ChunkKey& key, uint64_t offset, uint64_t chunk_size,
                          absl::Duration timeout, const ChunkSink& sink) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    exaserve::v1::FetchChunkRequest req;
    req.set_name(key.name);
    req.set_version(key.version);
    req.set_path(key.path);
    req.set_chunk_index(key.chunk_index);
    req.set_offset_in_chunk(offset);
    auto reader = Stub().FetchChunk(&ctx, req);
    exaserve::v1::ChunkData msg;
    uint64_t at = offset;
    absl::Status failure;
    while (failure.ok() && reader->Read(&msg)) {
      if (msg.offset_in_chunk() != at) {
        failure = absl::DataLossError(
            StrCat(name_, " sent bytes at ", msg.offset_in_chunk(), ", expected ", at));
      } else if (msg.data().size() > chunk_size - at) {
        failure = absl::DataLossError(StrCat(name_, " sent ", at + msg.data().size(),
                                             " bytes of a ", chunk_size, "-byte chunk"));
      } else {
        failure = sink(at, msg.data());
        at += msg.data().size();
      }
    }
    if (!failure.ok()) {
      ctx.TryCancel();
      reader->Finish();
      return failure;
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return FromGrpc(s, name_);
    if (at != chunk_size) {
      return absl::DataLossError(
          StrCat(name_, ": stream ended at byte ", at, " of a ", chunk_size, "-byte chunk"));
    }
    return absl::OkStatus();
  }

 private:
  exaserve::v1::Weights::Stub& Stub() { return *stubs_[next_++ % stubs_.size()]; }

  const std::string name_;
  std::vector<std::unique_ptr<exaserve::v1::Weights::Stub>> stubs_;
  std::atomic<size_t> next_{0};
};

}  // namespace

std::unique_ptr<Tier> MakeGrpcTier(std::string label, std::string address,
                                   GrpcTierOptions options) {
  return std::make_unique<GrpcTier>(std::move(label), std::move(address), options);
}

}  // namespace exa::weights
