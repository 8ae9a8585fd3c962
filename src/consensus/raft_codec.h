// The wire form of libraft's messages between scheduler nodes (docs/architecture.md#consistency).
// libraft 0.15 leaves encoding to its I/O backend; this is ours: little-endian, a version byte,
// the sender's id and node name, then the message. Decoding takes untrusted bytes: every length
// is bounded and checked, and a bad message is an error, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

struct raft_message;

namespace exa::consensus {

struct CodecLimits {
  size_t max_message_bytes = 64u << 20;  // one AppendEntries batch or snapshot
  size_t max_entries = 1u << 16;         // per AppendEntries
  size_t max_servers = 64;               // in a snapshot's configuration
  size_t max_address_bytes = 255;        // a node id
};

// `m` as libraft hands it to raft_io.send (server_id / server_address name the receiver);
// `from_id` / `from_address` name this node.
std::string EncodeMessage(uint64_t from_id, std::string_view from_address, const raft_message& m);

// Fills `m` from `bytes`; server_id / server_address name the sender (the address points into
// `*from_address`, which must outlive the use of `m`). Entries and snapshot data are allocated
// with raft_malloc, ownership passing to libraft's recv callback as its I/O contract says; on
// error nothing is left allocated.
absl::Status DecodeMessage(std::string_view bytes, const CodecLimits& limits, raft_message* m,
                           std::string* from_address);

// Releases what DecodeMessage allocated in `m` (for a message that is not handed to libraft).
void FreeDecoded(raft_message* m);

}  // namespace exa::consensus
