#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <atomic>
#include <chrono>

#include "common/status.h"
#include "common/strings.h"
#include "exaserve/v1/weights.grpc.pb.h"
#include "net/grpc_status.h"
#include "net/tls.h"
#include "weights/chunk_wire.h"
#include "weights/proto_convert.h"
#include "weights/tier.h"

namespace exa::weights {
namespace {

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
      if (options.stream_window_bytes > 0) {
        args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
        args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, options.stream_window_bytes);
      }
      auto channel = net::NewChannel(address, args);
      stubs_.push_back(exaserve::v1::Weights::NewStub(channel));
      channels_.push_back(std::move(channel));
    }
  }

  const std::string& name() const override { return name_; }

  absl::StatusOr<std::vector<ModelRef>> ListModels(absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    exaserve::v1::ListModelsResponse resp;
    grpc::Status s = Stub().ListModels(&ctx, exaserve::v1::ListModelsRequest(), &resp);
    if (!s.ok()) return net::StatusFromGrpc(s, name_);
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
    if (!s.ok()) return net::StatusFromGrpc(s, name_);
    auto m = FromProto(resp);
    // Its answer is damaged, not our request: DATA_LOSS, so the next tier is asked.
    if (!m.ok()) {
      return absl::DataLossError(
          StrCat(name_, " sent a bad manifest: ", ToStd(m.status().message())));
    }
    if (m->name != name || (!version.empty() && m->version != version)) {
      return absl::DataLossError(
          StrCat(name_, " answered with ", m->name, "@", m->version, " for ", name, "@", version));
    }
    return m;
  }

  // Reads the stream as raw ByteBuffers (the generated stub would copy each message's data into
  // a protobuf string first) and hands the sink views into the received slices.
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
    grpc::Channel* channel = channels_[next_++ % channels_.size()].get();
    const grpc::internal::RpcMethod method(kFetchChunkMethod,
                                           grpc::internal::RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel, method, &ctx, req));
    grpc::ByteBuffer buffer;
    std::vector<grpc::Slice> slices;
    std::vector<std::string_view> pieces;
    ChunkDataView view;
    exaserve::v1::ChunkData fallback;
    uint64_t at = offset;
    absl::Status failure;
    while (failure.ok() && reader->Read(&buffer)) {
      slices.clear();
      pieces.clear();
      if (!buffer.Dump(&slices).ok()) {
        failure = absl::DataLossError(StrCat(name_, " sent an unreadable message"));
        break;
      }
      for (const grpc::Slice& s : slices) {
        pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      if (!ParseChunkDataSlices(pieces, &view)) {
        // Not the canonical layout: let protobuf parse it (one copy, as before).
        std::string whole;
        for (std::string_view p : pieces) whole.append(p);
        if (!fallback.ParseFromString(whole)) {
          failure = absl::DataLossError(StrCat(name_, " sent a message that is not ChunkData"));
          break;
        }
        view = ChunkDataView();
        view.offset_in_chunk = fallback.offset_in_chunk();
        view.data_bytes = fallback.data().size();
        if (!fallback.data().empty()) view.data.push_back(fallback.data());
      }
      failure = Deliver(view, chunk_size, &at, sink);
    }
    if (!failure.ok()) {
      ctx.TryCancel();
      reader->Finish();
      return failure;
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return net::StatusFromGrpc(s, name_);
    if (at != chunk_size) {
      return absl::DataLossError(
          StrCat(name_, ": stream ended at byte ", at, " of a ", chunk_size, "-byte chunk"));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr char kFetchChunkMethod[] = "/exaserve.v1.Weights/FetchChunk";

  // One message's bytes into the sink, after checking they continue the chunk where the last
  // message ended and do not run past it.
  absl::Status Deliver(const ChunkDataView& view, uint64_t chunk_size, uint64_t* at,
                       const ChunkSink& sink) {
    if (view.offset_in_chunk != *at) {
      return absl::DataLossError(
          StrCat(name_, " sent bytes at ", view.offset_in_chunk, ", expected ", *at));
    }
    if (view.data_bytes > chunk_size - *at) {
      return absl::DataLossError(StrCat(name_, " sent ", *at + view.data_bytes, " bytes of a ",
                                        chunk_size, "-byte chunk"));
    }
    if (view.data_bytes == 0) return absl::OkStatus();
    EXA_RETURN_IF_ERROR(sink(*at, view.data));
    *at += view.data_bytes;
    return absl::OkStatus();
  }

  exaserve::v1::Weights::Stub& Stub() { return *stubs_[next_++ % stubs_.size()]; }

  const std::string name_;
  std::vector<std::unique_ptr<exaserve::v1::Weights::Stub>> stubs_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;  // stubs_[i] is over channels_[i]
  std::atomic<size_t> next_{0};
};

}  // namespace

std::unique_ptr<Tier> MakeGrpcTier(std::string label, std::string address,
                                   GrpcTierOptions options) {
  return std::make_unique<GrpcTier>(std::move(label), std::move(address), options);
}

}  // namespace exa::weights
