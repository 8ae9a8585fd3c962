#include "membership/codec.h"

#include <limits>
#include <type_traits>

#include "common/status.h"
#include "common/strings.h"
#include "exaserve/v1/membership.pb.h"

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

using pb = google::protobuf::MessageLite;

// Big-endian framing helpers for the packet layer (version byte, compound counts/lengths).
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) {
    U8(static_cast<uint8_t>(v >> 8));
    U8(static_cast<uint8_t>(v));
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
  std::string_view Bytes(size_t n) {
    if (!Need(n)) return {};
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

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

// Checks decoded fields against the core's bounds; the first violation is kept.
class Bounds {
 public:
  // A required identifier (node id, address).
  std::string Id(const std::string& s, size_t max_bytes, const char* field) {
    if (s.empty() || s.size() > max_bytes) Fail(field);
    return s;
  }
  std::string Optional(const std::string& s, size_t max_bytes, const char* field) {
    if (s.size() > max_bytes) Fail(field);
    return s;
  }
  template <typename List>
  std::vector<std::string> StrList(const List& items, const char* field) {
    if (static_cast<size_t>(items.size()) > kMaxListItems) Fail(field);
    return {items.begin(), items.end()};
  }
  uint16_t U16(uint32_t v, const char* field) {
    if (v > 0xffff) Fail(field);
    return static_cast<uint16_t>(v);
  }
  void Fail(const char* field) {
    if (error_.empty()) error_ = field;
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

void ToProto(const Metadata& m, exaserve::v1::GossipMetadata* p) {
  for (const auto& r : m.roles) p->add_roles(r);
  p->set_rack(m.rack);
  p->set_nvlink_domain(m.nvlink_domain);
  p->set_gpu_count(m.gpus.count);
  p->set_gpu_memory_mib_each(m.gpus.memory_mib_each);
  p->set_gpu_model(m.gpus.model);
  for (const auto& t : m.taints) p->add_taints(t);
  p->set_build_version(m.build_version);
  p->set_replicas_hosted(m.replicas.hosted);
  p->set_replicas_ready(m.replicas.ready);
  p->set_grpc_port(m.grpc_port);
  p->set_http_port(m.http_port);
}

Metadata FromProto(const exaserve::v1::GossipMetadata& p, Bounds& b) {
  if (p.ByteSizeLong() > kMaxMetadataBytes) b.Fail("metadata size");
  Metadata m;
  m.roles = b.StrList(p.roles(), "metadata.roles");
  m.rack = p.rack();
  m.nvlink_domain = p.nvlink_domain();
  m.gpus.count = b.U16(p.gpu_count(), "metadata.gpu_count");
  m.gpus.memory_mib_each = p.gpu_memory_mib_each();
  m.gpus.model = p.gpu_model();
  m.taints = b.StrList(p.taints(), "metadata.taints");
  m.build_version = p.build_version();
  m.replicas.hosted = b.U16(p.replicas_hosted(), "metadata.replicas_hosted");
  m.replicas.ready = b.U16(p.replicas_ready(), "metadata.replicas_ready");
  m.grpc_port = b.U16(p.grpc_port(), "metadata.grpc_port");
  m.http_port = b.U16(p.http_port(), "metadata.http_port");
  return m;
}

std::string Frame(MessageType type, const pb& body) {
  std::string out(1, static_cast<char>(type));
  body.AppendToString(&out);
  return out;
}

std::string Put(const Ping& m) {
  exaserve::v1::GossipPing p;
  p.set_seq(m.seq);
  p.set_target(m.target);
  p.set_source(m.source);
  p.set_source_address(m.source_address);
  return Frame(MessageType::kPing, p);
}
std::string Put(const IndirectPing& m) {
  exaserve::v1::GossipIndirectPing p;
  p.set_seq(m.seq);
  p.set_target(m.target);
  p.set_target_address(m.target_address);
  p.set_want_nack(m.want_nack);
  p.set_source(m.source);
  p.set_source_address(m.source_address);
  return Frame(MessageType::kIndirectPing, p);
}
std::string Put(const Ack& m) {
  exaserve::v1::GossipAck p;
  p.set_seq(m.seq);
  return Frame(MessageType::kAck, p);
}
std::string Put(const Nack& m) {
  exaserve::v1::GossipNack p;
  p.set_seq(m.seq);
  return Frame(MessageType::kNack, p);
}
std::string Put(const Suspect& m) {
  exaserve::v1::GossipSuspect p;
  p.set_incarnation(m.incarnation);
  p.set_node(m.node);
  p.set_from(m.from);
  return Frame(MessageType::kSuspect, p);
}
std::string Put(const Alive& m) {
  exaserve::v1::GossipAlive p;
  p.set_incarnation(m.incarnation);
  p.set_node(m.node);
  p.set_address(m.address);
  ToProto(m.metadata, p.mutable_metadata());
  return Frame(MessageType::kAlive, p);
}
std::string Put(const Dead& m) {
  exaserve::v1::GossipDead p;
  p.set_incarnation(m.incarnation);
  p.set_node(m.node);
  p.set_from(m.from);
  return Frame(MessageType::kDead, p);
}
std::string Put(const PushPull& m) {
  exaserve::v1::GossipPushPull p;
  p.set_seq(m.seq);
  p.set_join(m.join);
  p.set_response(m.response);
  p.set_source(m.source);
  p.set_source_address(m.source_address);
  for (const PushPullEntry& e : m.members) {
    auto* q = p.add_members();
    q->set_node(e.node);
    q->set_address(e.address);
    q->set_incarnation(e.incarnation);
    q->set_state(static_cast<uint32_t>(e.state));
    ToProto(e.metadata, q->mutable_metadata());
  }
  return Frame(MessageType::kPushPull, p);
}

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("gossip packet: malformed ", what));
}

template <typename Proto>
bool Parse(std::string_view body, Proto* p) {
  return body.size() <= static_cast<size_t>(INT32_MAX) &&
         p->ParseFromArray(body.data(), static_cast<int>(body.size()));
}

absl::StatusOr<Message> Build(MessageType type, std::string_view body, Bounds& b) {
  switch (type) {
    case MessageType::kPing: {
      exaserve::v1::GossipPing p;
      if (!Parse(body, &p)) break;
      return Message(Ping{p.seq(), b.Optional(p.target(), kMaxNodeIdBytes, "ping.target"),
                          b.Id(p.source(), kMaxNodeIdBytes, "ping.source"),
                          b.Id(p.source_address(), kMaxAddressBytes, "ping.source_address")});
    }
    case MessageType::kIndirectPing: {
      exaserve::v1::GossipIndirectPing p;
      if (!Parse(body, &p)) break;
      return Message(
          IndirectPing{p.seq(), b.Id(p.target(), kMaxNodeIdBytes, "ping-req.target"),
                       b.Id(p.target_address(), kMaxAddressBytes, "ping-req.target_address"),
                       p.want_nack(), b.Id(p.source(), kMaxNodeIdBytes, "ping-req.source"),
                       b.Id(p.source_address(), kMaxAddressBytes, "ping-req.source_address")});
    }
    case MessageType::kAck: {
      exaserve::v1::GossipAck p;
      if (!Parse(body, &p)) break;
      return Message(Ack{p.seq()});
    }
    case MessageType::kNack: {
      exaserve::v1::GossipNack p;
      if (!Parse(body, &p)) break;
      return Message(Nack{p.seq()});
    }
    case MessageType::kSuspect: {
      exaserve::v1::GossipSuspect p;
      if (!Parse(body, &p)) break;
      return Message(Suspect{p.incarnation(), b.Id(p.node(), kMaxNodeIdBytes, "suspect.node"),
                             b.Id(p.from(), kMaxNodeIdBytes, "suspect.from")});
    }
    case MessageType::kAlive: {
      exaserve::v1::GossipAlive p;
      if (!Parse(body, &p)) break;
      return Message(Alive{p.incarnation(), b.Id(p.node(), kMaxNodeIdBytes, "alive.node"),
                           b.Id(p.address(), kMaxAddressBytes, "alive.address"),
                           FromProto(p.metadata(), b)});
    }
    case MessageType::kDead: {
      exaserve::v1::GossipDead p;
      if (!Parse(body, &p)) break;
      return Message(Dead{p.incarnation(), b.Id(p.node(), kMaxNodeIdBytes, "dead.node"),
                          b.Id(p.from(), kMaxNodeIdBytes, "dead.from")});
    }
    case MessageType::kPushPull: {
      exaserve::v1::GossipPushPull p;
      if (!Parse(body, &p)) break;
      PushPull m{p.seq(),
                 p.join(),
                 p.response(),
                 b.Id(p.source(), kMaxNodeIdBytes, "push-pull.source"),
                 b.Id(p.source_address(), kMaxAddressBytes, "push-pull.source_address"),
                 {}};
      m.members.reserve(static_cast<size_t>(p.members_size()));
      for (const auto& q : p.members()) {
        if (q.state() >= static_cast<uint32_t>(kNumMemberStates)) b.Fail("member state");
        m.members.push_back({b.Id(q.node(), kMaxNodeIdBytes, "member.node"),
                             b.Id(q.address(), kMaxAddressBytes, "member.address"), q.incarnation(),
                             static_cast<MemberState>(q.state() & 3), FromProto(q.metadata(), b)});
      }
      return Message(std::move(m));
    }
    case MessageType::kCompound:
      return Malformed("nested compound");
  }
  return Malformed(StrCat("message of type ", static_cast<int>(type)));
}

}  // namespace

std::string EncodeMessage(const Message& message) {
  return std::visit([](const auto& m) { return Put(m); }, message);
}

// Every packet is framed as a compound, even with one message: protobuf cannot tell a message
// cut short at a field boundary from a whole one, and the length prefix can.
size_t PacketSize(const std::vector<std::string>& encoded_messages) {
  size_t n = kPacketHeaderBytes + kCompoundHeaderBytes;
  for (const std::string& m : encoded_messages) n += kCompoundPerMessageBytes + m.size();
  return n;
}

std::string EncodePacket(const std::vector<std::string>& encoded_messages) {
  std::string out;
  out.reserve(PacketSize(encoded_messages));
  out.push_back(static_cast<char>(kWireVersion));
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

std::string EncodeSingle(const Message& message) { return EncodePacket({EncodeMessage(message)}); }

size_t EncodedMetadataSize(const Metadata& metadata) {
  exaserve::v1::GossipMetadata p;
  ToProto(metadata, &p);
  return p.ByteSizeLong();
}

namespace {

absl::StatusOr<Message> DecodeOne(std::string_view bytes) {
  if (bytes.empty()) return Malformed("empty message");
  auto type = static_cast<MessageType>(static_cast<uint8_t>(bytes[0]));
  Bounds bounds;
  absl::StatusOr<Message> m = Build(type, bytes.substr(1), bounds);
  if (!m.ok()) return m.status();
  if (!bounds.error().empty()) return Malformed(bounds.error());
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
    return absl::InvalidArgumentError(StrCat("gossip packet: version ",
                                             static_cast<int>(static_cast<uint8_t>(packet[0])),
                                             ", expected ", static_cast<int>(kWireVersion)));
  }
  std::string_view body = packet.substr(1);
  std::vector<Message> out;
  if (static_cast<MessageType>(static_cast<uint8_t>(body[0])) != MessageType::kCompound) {
    return Malformed("packet (expected a compound frame)");
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
    if (!one.empty() &&
        static_cast<MessageType>(static_cast<uint8_t>(one[0])) == MessageType::kCompound) {
      return Malformed("nested compound");
    }
    EXA_ASSIGN_OR_RETURN(Message m, DecodeOne(one));
    out.push_back(std::move(m));
  }
  if (!r.done()) return Malformed("trailing bytes after compound");
  return out;
}

}  // namespace exa::membership
