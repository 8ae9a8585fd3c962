// The zero-copy ChunkData reader: whatever way gRPC splits a message into slices, it finds the
// offset and exactly the data protobuf serialized, and it refuses (so the caller falls back to
// protobuf) anything truncated or laid out differently.
#include <catch2/catch.hpp>

#include "exaserve/v1/weights.pb.h"
#include "weights/chunk_wire.h"

namespace exa::weights {
namespace {

std::string Serialized(uint64_t offset, const std::string& data) {
  exaserve::v1::ChunkData msg;
  msg.set_offset_in_chunk(offset);
  msg.set_data(data);
  return msg.SerializeAsString();
}

// `wire` cut into pieces of `size` bytes, as a transport might deliver it.
std::vector<std::string_view> Cut(const std::string& wire, size_t size) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < wire.size(); i += size) {
    out.push_back(std::string_view(wire).substr(i, size));
  }
  return out;
}

std::string Joined(const ChunkDataView& v) {
  std::string out;
  for (std::string_view p : v.data) out.append(p);
  return out;
}

TEST_CASE("ChunkData slices parse to protobuf's offset and data, however cut", "[weights]") {
  std::string data(70000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  for (uint64_t offset : {uint64_t{0}, uint64_t{1} << 20, uint64_t{1} << 40}) {
    const std::string wire = Serialized(offset, data);
    for (size_t cut : {size_t{1}, size_t{3}, size_t{16384}, wire.size()}) {
      ChunkDataView v;
      REQUIRE(ParseChunkDataSlices(Cut(wire, cut), &v));
      CHECK(v.offset_in_chunk == offset);
      CHECK(v.data_bytes == data.size());
      CHECK(Joined(v) == data);
    }
  }
  ChunkDataView v;
  REQUIRE(ParseChunkDataSlices(Cut(Serialized(5, ""), 1), &v));  // offset only
  CHECK(v.offset_in_chunk == 5);
  CHECK(v.data_bytes == 0);
  REQUIRE(ParseChunkDataSlices({}, &v));  // every field at its default
  CHECK(v.offset_in_chunk == 0);
  CHECK(v.data.empty());
}

TEST_CASE("ChunkData slices refuse truncated or unexpected layouts", "[weights]") {
  const std::string wire = Serialized(7, std::string(1000, 'x'));
  ChunkDataView v;
  CHECK_FALSE(ParseChunkDataSlices({std::string_view(wire).substr(0, wire.size() - 1)}, &v));
  const std::string longer = wire + "y";
  CHECK_FALSE(ParseChunkDataSlices({longer}, &v));
  // Data before the offset is valid protobuf, but not what this reader takes.
  exaserve::v1::ChunkData msg;
  msg.set_data("abc");
  const std::string reordered = msg.SerializeAsString() + std::string("\x08\x07", 2);
  CHECK_FALSE(ParseChunkDataSlices({reordered}, &v));
  CHECK_FALSE(ParseChunkDataSlices({std::string("\x08\xff", 2)}, &v));  // varint cut off
  CHECK_FALSE(ParseChunkDataSlices({std::string("\x1a\x00", 2)}, &v));  // unknown field 3
}

}  // namespace
}  // namespace exa::weights
