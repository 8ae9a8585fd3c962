#include "weights/weights_service.h"

#include "cluster/model_names.h"
#include "common/strings.h"
#include "net/grpc_status.h"
#include "weights/proto_convert.h"
#include "weights/sha256.h"

namespace exa::weights {
std::string PeerHost(const std::string& peer) {
  std::string_view p = peer;
  size_t colon = p.find(':');
  if (colon != std::string_view::npos && (p.starts_with("ipv4:") || p.starts_with("ipv6:"))) {
    p.remove_prefix(colon + 1);
  }
  size_t last = p.rfind(':');
  if (last != std::string_view::npos) p = p.substr(0, last);
  return std::string(p);
}

WeightsService::WeightsService(WeightsSource& source, ServiceOptions options,
                               metrics::Registry& registry, std::string role)
    : source_(source),
      options_(options),
      served_bytes_metric_(registry
                               .AddCounter("exaserve_weights_served_bytes_total",
                                           "Chunk bytes this node sent to Weights clients.",
                                           {"role"})
                               .WithLabels({role})),
      chunks_served_metric_(registry
                                .AddCounter("exaserve_weights_served_chunks_total",
                                            "FetchChunk streams completed.", {"role"})
                                .WithLabels({role})),
      rejected_metric_(registry
                           .AddCounter("exaserve_weights_streams_rejected_total",
                                       "FetchChunk streams refused over the stream bounds.",
                                       {"role"})
                           .WithLabels({role})),
      errors_metric_(registry.AddCounter("exaserve_weights_request_errors_total",
                                         "Weights calls that failed, by method and code.",
                                         {"method", "code"})) {
  registry.AddGaugeCallback("exaserve_weights_streams_active", "FetchChunk streams open now.",
                            [this] { return static_cast<double>(active_.load()); });
}

grpc::Status WeightsService::ListModels(grpc::ServerContext*,
                                        const exaserve::v1::ListModelsRequest*,
                                        exaserve::v1::ListModelsResponse* response) {
  auto models = source_.ListModels();
  if (!models.ok()) {
    errors_metric_.WithLabels({"ListModels", absl::StatusCodeToString(models.status().code())})
        .Increment();
    return net::StatusToGrpc(models.status());
  }
  for (const ModelRef& m : *models) {
    auto* ref = response->add_models();
    ref->set_name(m.name);
    ref->set_version(m.version);
    ref->set_manifest_digest(m.manifest_digest);
  }
  return grpc::Status::OK;
}

grpc::Status WeightsService::GetManifest(grpc::ServerContext*,
                                         const exaserve::v1::GetManifestRequest* request,
                                         exaserve::v1::Manifest* response) {
  auto m = source_.GetManifest(request->name(), request->version());
  if (!m.ok()) {
    errors_metric_.WithLabels({"GetManifest", absl::StatusCodeToString(m.status().code())})
        .Increment();
    return net::StatusToGrpc(m.status());
  }
  ToProto(*m, response);
  return grpc::Status::OK;
}

bool WeightsService::Admit(const std::string& client) {
  absl::MutexLock lock(&mu_);
  int& mine = per_client_[client];
  if (active_.load() >= options_.max_streams_total || mine >= options_.max_streams_per_client) {
    if (mine == 0) per_client_.erase(client);
    return false;
  }
  ++mine;
  ++active_;
  return true;
}

void WeightsService::Release(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
  --active_;
}

grpc::Status WeightsService::FetchChunk(grpc::ServerContext* context,
                                        const exaserve::v1::FetchChunkRequest* request,
                                        grpc::ServerWriter<exaserve::v1::ChunkData>* writer) {
  const std::string client = PeerHost(context->peer());
  if (!Admit(client)) {
    rejected_metric_.Increment();
    return grpc::Status(grpc::RESOURCE_EXHAUSTED,
                        StrCat("weights: stream limit reached (", options_.max_streams_per_client,
                               " per client, ", options_.max_streams_total, " in total)"));
  }
  auto fail = [&](const absl::Status& s) {
    errors_metric_.WithLabels({"FetchChunk", absl::StatusCodeToString(s.code())}).Increment();
    Release(client);
    return net::StatusToGrpc(s);
  };
  absl::Status valid = cluster::ValidateModelName("name", request->name());
  if (valid.ok()) valid = cluster::ValidateModelVersion("version", request->version());
  if (valid.ok()) valid = ValidateRelativePath(request->path());
  if (!valid.ok()) return fail(valid);
  ChunkKey key{request->name(), request->version(), request->path(), request->chunk_index()};
  auto reader = source_.OpenChunk(key, [context] { return context->IsCancelled(); });
  if (!reader.ok()) return fail(reader.status());
  uint64_t offset = request->offset_in_chunk();
  if (offset > (*reader)->size()) {
    return fail(absl::OutOfRangeError(
        StrCat("offset_in_chunk ", offset, ": the chunk has ", (*reader)->size(), " bytes")));
  }
  // Hash on the way out when the source asks and the whole chunk is sent.
  const bool verify = !(*reader)->expected_sha256().empty() && offset == 0;
  Sha256 hash;
  exaserve::v1::ChunkData msg;
  while (offset < (*reader)->size()) {
    if (context->IsCancelled()) return fail(absl::CancelledError("client cancelled"));
    size_t n =
        static_cast<size_t>(std::min<uint64_t>(options_.message_bytes, (*reader)->size() - offset));
    std::string* data = msg.mutable_data();
    data->resize(n);
    auto got = (*reader)->ReadAt(offset, data->data(), n);
    if (!got.ok()) return fail(got.status());
    if (verify) hash.Update(*data);
    msg.set_offset_in_chunk(offset);
    if (!writer->Write(msg)) return fail(absl::CancelledError("client went away"));
    offset += n;
    served_bytes_.fetch_add(n);
    served_bytes_metric_.Increment(static_cast<double>(n));
  }
  if (verify) (*reader)->ReportVerified(hash.FinalHex() == (*reader)->expected_sha256());
  chunks_served_metric_.Increment();
  Release(client);
  return grpc::Status::OK;
}

}  // namespace exa::weights
