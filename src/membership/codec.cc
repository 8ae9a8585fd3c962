#include "membership/codec.h"

#include <limits>
#include <type_traits>

#include "common/status.h"
#include "common/strings.h"

namespace exa::membership {
namespace {

enum class MessageType : uint8_t {
  kPing = 1,
  kIndirectPing = 2,
  kAck = 3,
  kNack = 4,
  kSuspect = 5,
  kAlive = 6,
  kDead = 7,
  kPushPull = 8,
  kCompound = 9,
};

// Lists inside metadata are short by nature (roles, taints); bound them so bad input cannot
// make us allocate.
constexpr size_t kMaxListItems = 64;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) {
    U8(static_cast<uint8_t>(v >> 8));
    U8(static_cast<uint8_t>(v));
  }
  void U32(uint32_t v) {
    U16(static_cast<uint16_t>(v >> 16));
    U16(static_cast<uint16_t>(v));
  }
  void Bool(bool v) { U8(v ? 1 : 0); }
  // Longer strings are a bug of the caller (ids and metadata are validated before they get
  // here); truncate rather than emit a length that lies.
  void Str(std::string_view s) {
    size_t n = std::min<size_t>(s.size(), std::numeric_limits<uint16_t>::max());
    U16(static_cast<uint16_t>(n));
    out_.append(s.data(), n);
  }
  void StrList(const std::vector<std::string>& items) {
    size_t n = std::min(items.size(), kMaxListItems);
    U16(static_cast<uint16_t>(n));
    for (size_t i = 0; i < n; ++i) Str(items[i]);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }
  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint16_t U16() {
    uint16_t hi = U8();
    return static_cast<uint16_t>((hi << 8) | U8());
  }
  uint32_t U32() {
    uint32_t hi = U16();
    return (hi << 16) | U16();
  }
  bool Bool() {
    uint8_t v = U8();
    if (v > 1) Fail();
    return v == 1;
  }
  std::string Str(size_t max_bytes) {
    size_t n = U16();
    if (n > max_bytes || !Need(n)) {
      Fail();
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::string_view Bytes(size_t n) {
    if (!Need(n)) return {};
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A node id or address: required, bounded.
  std::string Id(size_t max_bytes) {
    std::string s = Str(max_bytes);
    if (s.empty()) Fail();
    return s;
  }
  std::vector<std::string> StrList(size_t max_item_bytes) {
    size_t n = U16();
    if (n > kMaxListItems) {
      Fail();
      return {};
    }
    std::vector<std::string> items;
    for (size_t i = 0; i < n && ok_; ++i) items.push_back(Str(max_item_bytes));
    return items;
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
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

void PutMetadata(Writer& w, const Metadata& m) {
  w.StrList(m.roles);
  w.Str(m.rack);
  w.Str(m.nvlink_domain);
  w.U16(m.gpus.count);
  w.U32(m.gpus.memory_mib_each);
  w.Str(m.gpus.model);
  w.StrList(m.taints);
  w.Str(m.build_version);
  w.U16(m.replicas.hosted);
  w.U16(m.replicas.ready);
}

Metadata GetMetadata(Reader& r) {
  Metadata m;
  m.roles = r.StrList(kMaxMetadataBytes);
  m.rack = r.Str(kMaxMetadataBytes);
  m.nvlink_domain = r.Str(kMaxMetadataBytes);
  m.gpus.count = r.U16();
  m.gpus.memory_mib_each = r.U32();
  m.gpus.model = r.Str(kMaxMetadataBytes);
  m.taints = r.StrList(kMaxMetadataBytes);
  m.build_version = r.Str(kMaxMetadataBytes);
  m.replicas.hosted = r.U16();
  m.replicas.ready = r.U16();
  return m;
}

// Metadata is length-prefixed so its bound is checked before it is parsed.
void PutBoundedMetadata(Writer& w, const Metadata& m) {
  Writer inner;
  PutMetadata(inner, m);
  w.Str(inner.Take());
}

Metadata GetBoundedMetadata(Reader& r) {
  std::string bytes = r.Str(kMaxMetadataBytes);
  if (!r.ok()) return {};
  Reader inner(bytes);
  Metadata m = GetMetadata(inner);
  if (!inner.ok() || !inner.done()) r.Fail();
  return m;
}

void Put(Writer& w, const Ping& m) {
  w.U8(static_cast<uint8_t>(MessageType::kPing));
  w.U32(m.seq);
  w.Str(m.target);
  w.Str(m.source);
  w.Str(m.source_address);
}
void Put(Writer& w, const IndirectPing& m) {
  w.U8(static_cast<uint8_t>(MessageType::kIndirectPing));
  w.U32(m.seq);
  w.Str(m.target);
  w.Str(m.target_address);
  w.Bool(m.want_nack);
  w.Str(m.source);
  w.Str(m.source_address);
}
void Put(Writer& w, const Ack& m) {
  w.U8(static_cast<uint8_t>(MessageType::kAck));
  w.U32(m.seq);
}
void Put(Writer& w, const Nack& m) {
  w.U8(static_cast<uint8_t>(MessageType::kNack));
  w.U32(m.seq);
}
void Put(Writer& w, const Suspect& m) {
  w.U8(static_cast<uint8_t>(MessageType::kSuspect));
  w.U32(m.incarnation);
  w.Str(m.node);
  w.Str(m.from);
}
void Put(Writer& w, const Alive& m) {
  w.U8(static_cast<uint8_t>(MessageType::kAlive));
  w.U32(m.incarnation);
  w.Str(m.node);
  w.Str(m.address);
  PutBoundedMetadata(w, m.metadata);
}
void Put(Writer& w, const Dead& m) {
  w.U8(static_cast<uint8_t>(MessageType::kDead));
  w.U32(m.incarnation);
  w.Str(m.node);
  w.Str(m.from);
}
void Put(Writer& w, const PushPull& m) {
  w.U8(static_cast<uint8_t>(MessageType::kPushPull));
  w.U32(m.seq);
  w.Bool(m.join);
  w.Bool(m.response);
  w.Str(m.source);
  w.Str(m.source_address);
  size_t n = std::min<size_t>(m.members.size(), std::numeric_limits<uint16_t>::max());
  w.U16(static_cast<uint16_t>(n));
  for (size_t i = 0; i < n; ++i) {
    const PushPullEntry& e = m.members[i];
    w.Str(e.node);
    w.Str(e.address);
    w.U32(e.incarnation);
    w.U8(static_cast<uint8_t>(e.state));
    PutBoundedMetadata(w, e.metadata);
  }
}

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("gossip packet: malformed ", what));
}

absl::StatusOr<Message> GetBody(Reader& r, MessageType type) {
  switch (type) {
    case MessageType::kPing: {
      Ping m;
      m.seq = r.U32();
      m.target = r.Str(kMaxNodeIdBytes);  // empty: probe whoever listens here
      m.source = r.Id(kMaxNodeIdBytes);
      m.source_address = r.Id(kMaxAddressBytes);
      return Message(std::move(m));
    }
    case MessageType::kIndirectPing: {
      IndirectPing m;
      m.seq = r.U32();
      m.target = r.Id(kMaxNodeIdBytes);
      m.target_address = r.Id(kMaxAddressBytes);
      m.want_nack = r.Bool();
      m.source = r.Id(kMaxNodeIdBytes);
      m.source_address = r.Id(kMaxAddressBytes);
      return Message(std::move(m));
    }
    case MessageType::kAck:
      return Message(Ack{r.U32()});
    case MessageType::kNack:
      return Message(Nack{r.U32()});
    case MessageType::kSuspect: {
      Suspect m;
      m.incarnation = r.U32();
      m.node = r.Id(kMaxNodeIdBytes);
      m.from = r.Id(kMaxNodeIdBytes);
      return Message(std::move(m));
    }
    case MessageType::kAlive: {
      Alive m;
      m.incarnation = r.U32();
      m.node = r.Id(kMaxNodeIdBytes);
      m.address = r.Id(kMaxAddressBytes);
      m.metadata = GetBoundedMetadata(r);
      return Message(std::move(m));
    }
    case MessageType::kDead: {
      Dead m;
      m.incarnation = r.U32();
      m.node = r.Id(kMaxNodeIdBytes);
      m.from = r.Id(kMaxNodeIdBytes);
      return Message(std::move(m));
    }
    case MessageType::kPushPull: {
      PushPull m;
      m.seq = r.U32();
      m.join = r.Bool();
      m.response = r.Bool();
      m.source = r.Id(kMaxNodeIdBytes);
      m.source_address = r.Id(kMaxAddressBytes);
      size_t n = r.U16();
      // Each entry takes at least 13 bytes; a count the input cannot hold is a lie.
      if (n * 13 > r.remaining()) return Malformed("push-pull count");
      m.members.reserve(n);
      for (size_t i = 0; i < n && r.ok(); ++i) {
        PushPullEntry e;
        e.node = r.Id(kMaxNodeIdBytes);
        e.address = r.Id(kMaxAddressBytes);
        e.incarnation = r.U32();
        uint8_t state = r.U8();
        if (state >= kNumMemberStates) return Malformed("member state");
        e.state = static_cast<MemberState>(state);
        e.metadata = GetBoundedMetadata(r);
        m.members.push_back(std::move(e));
      }
      return Message(std::move(m));
    }
    case MessageType::kCompound:
      break;
  }
  return Malformed(StrCat("message type ", static_cast<int>(type)));
}

}  // namespace

std::string EncodeMessage(const Message& message) {
  Writer w;
  std::visit([&w](const auto& m) { Put(w, m); }, message);
  return w.Take();
}

size_t PacketSize(const std::vector<std::string>& encoded_messages) {
  if (encoded_messages.size() == 1) return kPacketHeaderBytes + encoded_messages[0].size();
  size_t n = kPacketHeaderBytes + kCompoundHeaderBytes;
  for (const std::string& m : encoded_messages) n += kCompoundPerMessageBytes + m.size();
  return n;
}

std::string EncodePacket(const std::vector<std::string>& encoded_messages) {
  std::string out;
  out.reserve(PacketSize(encoded_messages));
  out.push_back(static_cast<char>(kWireVersion));
  if (encoded_messages.size() == 1) {
    out += encoded_messages[0];
    return out;
  }
  Writer w;
  w.U8(static_cast<uint8_t>(MessageType::kCompound));
  w.U16(static_cast<uint16_t>(encoded_messages.size()));
  out += w.Take();
  for (const std::string& m : encoded_messages) {
    Writer len;
    len.U16(static_cast<uint16_t>(m.size()));
    out += len.Take();
    out += m;
  }
  return out;
}

std::string EncodeSingle(const Message& message) {
  return EncodePacket({EncodeMessage(message)});
}

size_t EncodedMetadataSize(const Metadata& metadata) {
  Writer w;
  PutMetadata(w, metadata);
  return w.Take().size();
}

namespace {

absl::StatusOr<Message> DecodeOne(std::string_view bytes) {
  Reader r(bytes);
  auto type = static_cast<MessageType>(r.U8());
  if (!r.ok()) return Malformed("empty message");
  absl::StatusOr<Message> m = GetBody(r, type);
  if (!m.ok()) return m.status();
  if (!r.ok()) return Malformed(StrCat("message of type ", static_cast<int>(type)));
  if (!r.done()) return Malformed(StrCat("trailing bytes after type ", static_cast<int>(type)));
  return m;
}

}  // namespace

absl::StatusOr<std::vector<Message>> DecodePacket(std::string_view packet, size_t max_bytes) {
  if (packet.size() > max_bytes) {
    return absl::InvalidArgumentError(
        StrCat("gossip packet: ", packet.size(), " bytes, limit ", max_bytes));
  }
  if (packet.size() < 2) return Malformed("packet (too short)");
  if (static_cast<uint8_t>(packet[0]) != kWireVersion) {
    return absl::InvalidArgumentError(
        StrCat("gossip packet: version ", static_cast<int>(static_cast<uint8_t>(packet[0])),
               ", expected ", static_cast<int>(kWireVersion)));
  }
  std::string_view body = packet.substr(1);
  std::vector<Message> out;
  if (static_cast<MessageType>(static_cast<uint8_t>(body[0])) != MessageType::kCompound) {
    EXA_ASSIGN_OR_RETURN(Message m, DecodeOne(body));
    out.push_back(std::move(m));
    return out;
  }
  Reader r(body.substr(1));
  size_t count = r.U16();
  if (!r.ok() || count == 0) return Malformed("compound count");
  if (count * kCompoundPerMessageBytes > r.remaining()) return Malformed("compound count");
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    size_t len = r.U16();
    std::string_view one = r.Bytes(len);
    if (!r.ok()) return Malformed("compound length");
    if (!one.empty() && static_cast<MessageType>(static_cast<uint8_t>(one[0])) ==
                            MessageType::kCompound) {
      return Malformed("nested compound");
    }
    EXA_ASSIGN_OR_RETURN(Message m, DecodeOne(one));
    out.push_back(std::move(m));
  }
  if (!r.done()) return Malformed("trailing bytes after compound");
  return out;
}

}  // namespace exa::membership
