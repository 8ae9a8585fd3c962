// Little-endian byte encoding for binary wire and disk formats that do not use protobuf
// (docs/architecture.md#consistency: the Raft messages and the spec store's commands).
//   ByteWriter appends fixed-width integers and length-prefixed bytes to a string;
//   ByteReader reads them back from untrusted input: every read is bounds-checked, the first
//   short read turns the reader not-ok and every later read returns zero / empty.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace exa {

class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Fixed(v, 2); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void U64(uint64_t v) { Fixed(v, 8); }
  void Raw(std::string_view bytes) { out_.append(bytes); }
  // A 32-bit length, then the bytes.
  void Bytes(std::string_view bytes) {
    U32(static_cast<uint32_t>(bytes.size()));
    Raw(bytes);
  }
  size_t size() const { return out_.size(); }
  std::string Take() { return std::move(out_); }

 private:
  void Fixed(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }

  uint8_t U8() { return static_cast<uint8_t>(Fixed(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Fixed(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Fixed(4)); }
  uint64_t U64() { return Fixed(8); }
  std::string_view Raw(size_t n) {
    if (!Need(n)) return {};
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A 32-bit length, then the bytes; fails when the length passes `max_bytes` or the input.
  std::string_view Bytes(size_t max_bytes) {
    uint32_t n = U32();
    if (n > max_bytes) ok_ = false;
    if (!ok_) return {};
    return Raw(n);
  }
  void Fail() { ok_ = false; }

 private:
  bool Need(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  uint64_t Fixed(int n) {
    if (!Need(static_cast<size_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace exa
