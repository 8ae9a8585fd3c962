#include "weights/chunk_wire.h"

namespace exa::weights {
namespace {

// Reads bytes across piece boundaries; only the few header bytes go through here.
class Cursor {
 public:
  explicit Cursor(const std::vector<std::string_view>& pieces) : pieces_(pieces) { Skip(); }

  bool AtEnd() const { return piece_ == pieces_.size(); }

  bool Byte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = static_cast<uint8_t>(pieces_[piece_][at_]);
    ++at_;
    Skip();
    return true;
  }

  // Protobuf base-128 varint: at most 10 bytes for 64 bits.
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = 0;
      if (!Byte(&b)) return false;
      *v |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // The rest of the message, which must be exactly `n` bytes.
  bool Rest(uint64_t n, ChunkDataView* out) {
    uint64_t got = 0;
    for (; piece_ < pieces_.size(); ++piece_, at_ = 0) {
      std::string_view p = pieces_[piece_].substr(at_);
      if (p.empty()) continue;
      out->data.push_back(p);
      got += p.size();
    }
    out->data_bytes = got;
    return got == n;
  }

 private:
  void Skip() {
    while (piece_ < pieces_.size() && at_ >= pieces_[piece_].size()) {
      ++piece_;
      at_ = 0;
    }
  }

  const std::vector<std::string_view>& pieces_;
  size_t piece_ = 0;
  size_t at_ = 0;
};

constexpr uint8_t kOffsetTag = (1 << 3) | 0;  // field 1, varint
constexpr uint8_t kDataTag = (2 << 3) | 2;    // field 2, length-delimited

}  // namespace

bool ParseChunkDataSlices(const std::vector<std::string_view>& message, ChunkDataView* out) {
  *out = ChunkDataView();
  Cursor c(message);
  if (c.AtEnd()) return true;  // every field at its default
  uint8_t tag = 0;
  if (!c.Byte(&tag)) return false;
  if (tag == kOffsetTag) {
    if (!c.Varint(&out->offset_in_chunk)) return false;
    if (c.AtEnd()) return true;  // no data
    if (!c.Byte(&tag)) return false;
  }
  if (tag != kDataTag) return false;
  uint64_t length = 0;
  if (!c.Varint(&length)) return false;
  return c.Rest(length, out);
}

}  // namespace exa::weights
