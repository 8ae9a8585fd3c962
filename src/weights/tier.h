// A place the node fetcher and the rack cache get weights from: a rack cache peer or the origin
// over gRPC (GrpcTier), or a test double. Every answer is checked here or by the caller: a
// peer's manifest is validated, its chunk stream must be contiguous and must not run past the
// chunk, and the caller hashes the bytes before using them.
//
// Thread safety: implementations are called from many fetch threads at once.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "weights/manifest.h"
#include "weights/source.h"

namespace exa::weights {

// Receives chunk bytes in order: `offset_in_chunk` of the first byte, then the bytes of one
// message as the pieces they arrived in (views into the transport's buffers, valid only during
// the call: a sink writes them with one pwritev and hashes them while they are in cache).
using ChunkSink = std::function<absl::Status(uint64_t offset_in_chunk,
                                             absl::Span<const std::string_view> pieces)>;

class Tier {
 public:
  virtual ~Tier() = default;
  // For logs, metrics and progress: "rack-cache 10.1.0.5:7070", "origin 10.0.0.1:7070".
  virtual const std::string& name() const = 0;
  virtual absl::StatusOr<std::vector<ModelRef>> ListModels(absl::Duration timeout) = 0;
  virtual absl::StatusOr<Manifest> GetManifest(const std::string& name, const std::string& version,
                                               absl::Duration timeout) = 0;
  // Streams the chunk from `offset` to its end (`chunk_size` bytes in all) into `sink`. A stream
  // that is not contiguous, runs past the chunk or ends early is DATA_LOSS; a sink error stops
  // the stream and is returned.
  virtual absl::Status FetchChunk(const ChunkKey& key, uint64_t offset, uint64_t chunk_size,
                                  absl::Duration timeout, const ChunkSink& sink) = 0;
};

struct GrpcTierOptions {
  // Separate connections, so parallel streams are not all behind one TCP window.
  int connections = 8;
  int max_message_bytes = 4 << 20;  // data messages are at most 1 MiB
  // Each stream's HTTP/2 receive window, fixed (gRPC's BDP probing off). With probing, a peer
  // faster than the node's hashing grew the windows until a 2 GiB pull held 400-800 MB of
  // received, unread messages; fixed, a pull holds at most connections x this, and 8 MiB still
  // covers 8 streams x 8 MiB / 1 ms = 64 GB/s of bandwidth-delay product. 0: gRPC's default.
  int stream_window_bytes = 8 << 20;
};

// Makes "<label> <address>" tier; connections are made lazily by gRPC.
std::unique_ptr<Tier> MakeGrpcTier(std::string label, std::string address,
                                   GrpcTierOptions options = {});

}  // namespace exa::weights
