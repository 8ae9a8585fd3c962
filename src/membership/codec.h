// The gossip wire format. Contract:
//   packet   := version:u8 compound   (always compound, even for one message: the lengths are
//                                      what catches a message cut short)
//   compound := type=kCompound count:u16 { length:u16 message }*count   (no nesting)
//   message  := type:u8 body          (body: the protobuf of proto/exaserve/v1/membership.proto)
// Framing integers are big-endian. Decoding is all or nothing: malformed, truncated, oversized
// input, or fields beyond the core's bounds (ids, addresses, metadata size and list lengths)
// are an error and yield no message, so a bad packet can never change membership state. Only
// this file pair knows the layout.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "membership/messages.h"

namespace exa::membership {

inline constexpr uint8_t kWireVersion = 1;
// Bytes a packet adds around its messages: the version byte, the compound type and count, and a
// length per message.
inline constexpr size_t kPacketHeaderBytes = 1;
inline constexpr size_t kCompoundHeaderBytes = 3;
inline constexpr size_t kCompoundPerMessageBytes = 2;

// One message as type + body, without the version byte (what the broadcast queue stores).
std::string EncodeMessage(const Message& message);
// A packet from already-encoded messages.
std::string EncodePacket(const std::vector<std::string>& encoded_messages);
// Size EncodePacket would produce.
size_t PacketSize(const std::vector<std::string>& encoded_messages);
// Convenience: one message as a packet.
std::string EncodeSingle(const Message& message);

// Decodes a whole packet. `max_bytes` rejects anything larger before parsing.
absl::StatusOr<std::vector<Message>> DecodePacket(std::string_view packet, size_t max_bytes);

// Encoded metadata alone, for the size bound (kMaxMetadataBytes).
size_t EncodedMetadataSize(const Metadata& metadata);

}  // namespace exa::membership
