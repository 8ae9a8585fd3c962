// exaserve.v1.ChunkData read straight from the slices gRPC received, without copying the data
// into a protobuf string: a node's pull hashes and writes each 1 MiB message from the buffers the
// transport filled, while they are still in cache (the copy into a std::string was one more pass
// over every byte on the same cores that receive, hash and write).
//
// Only the layout protobuf serializers write is taken on this fast path: an optional field 1
// (offset_in_chunk, varint) then field 2 (data, length-delimited) running to the end of the
// message. Anything else (field order changed, unknown fields) answers false and the caller
// parses the message with protobuf instead.
//
// Pure: no I/O.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace exa::weights {

struct ChunkDataView {
  uint64_t offset_in_chunk = 0;
  // The data in order, as views into the caller's slices; empty pieces are left out.
  std::vector<std::string_view> data;
  uint64_t data_bytes = 0;
};

// Parses `message`, given as the ordered pieces of one serialized ChunkData; `out`'s views point
// into those pieces. False when the bytes are not in the canonical layout (see above) or are
// truncated; `out` is then unspecified.
bool ParseChunkDataSlices(const std::vector<std::string_view>& message, ChunkDataView* out);

}  // namespace exa::weights
