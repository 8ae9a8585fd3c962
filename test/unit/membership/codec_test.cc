// The gossip codec round-trips every message and rejects malformed, truncated, oversized and
// random input with an error instead of crashing or returning a partial result.
#include "membership/codec.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"

namespace exa::membership {
namespace {

Metadata SampleMetadata() {
  Metadata m;
  m.roles = {"gateway", "scheduler"};
  m.rack = "rack-07";
  m.nvlink_domain = "nvl-07-3";
  m.gpus = GpuSummary{8, 81920, "H100-SXM"};
  m.taints = {"burn-in-failed"};
  m.build_version = "0.1.0+abc";
  m.replicas = ReplicaSummary{12, 11};
  m.grpc_port = 7070;
  m.http_port = 8080;
  return m;
}

std::vector<Message> AllMessages() {
  return {
      Ping{7, "node-b", "node-a", "10.0.0.1:7946"},
      Ping{8, "", "node-a", "10.0.0.1:7946"},
      IndirectPing{9, "node-c", "10.0.0.3:7946", true, "node-a", "10.0.0.1:7946"},
      Ack{0xFFFFFFFF},
      Nack{3},
      Suspect{4, "node-c", "node-a"},
      Alive{5, "node-c", "10.0.0.3:7946", SampleMetadata()},
      Dead{6, "node-c", "node-c"},
      PushPull{10,
               true,
               false,
               "node-a",
               "10.0.0.1:7946",
               {PushPullEntry{"node-a", "10.0.0.1:7946", 1, MemberState::kAlive, {}},
                PushPullEntry{"node-b", "10.0.0.2:7946", 9, MemberState::kDead, SampleMetadata()}}},
  };
}

TEST_CASE("Every message round-trips alone and inside a compound packet", "[membership][codec]") {
  std::vector<std::string> encoded;
  for (const Message& m : AllMessages()) {
    auto decoded = DecodePacket(EncodeSingle(m), 1 << 20);
    REQUIRE(decoded.ok());
    REQUIRE(decoded->size() == 1);
    CHECK((*decoded)[0] == m);
    encoded.push_back(EncodeMessage(m));
  }
  std::string packet = EncodePacket(encoded);
  CHECK(packet.size() == PacketSize(encoded));
  auto decoded = DecodePacket(packet, 1 << 20);
  REQUIRE(decoded.ok());
  CHECK(*decoded == AllMessages());
}

TEST_CASE("Every truncation of a valid packet is an error", "[membership][codec]") {
  std::vector<std::string> encoded;
  for (const Message& m : AllMessages()) encoded.push_back(EncodeMessage(m));
  std::string packet = EncodePacket(encoded);
  for (size_t len = 0; len < packet.size(); ++len) {
    INFO("length " << len);
    CHECK_FALSE(DecodePacket(packet.substr(0, len), 1 << 20).ok());
  }
  for (const Message& m : AllMessages()) {
    std::string one = EncodeSingle(m);
    for (size_t len = 0; len < one.size(); ++len) {
      CHECK_FALSE(DecodePacket(one.substr(0, len), 1 << 20).ok());
    }
    CHECK_FALSE(DecodePacket(one + "x", 1 << 20).ok());  // trailing bytes
  }
}

TEST_CASE("Wrong version, oversized and nested packets are rejected", "[membership][codec]") {
  std::string packet = EncodeSingle(Ack{1});
  std::string wrong_version = packet;
  wrong_version[0] = 2;
  CHECK_FALSE(DecodePacket(wrong_version, 1400).ok());
  CHECK_FALSE(DecodePacket(packet, packet.size() - 1).ok());
  std::string inner = EncodePacket({EncodeMessage(Ack{1}), EncodeMessage(Ack{2})}).substr(1);
  std::string nested = EncodePacket({inner, EncodeMessage(Ack{3})});
  CHECK_FALSE(DecodePacket(nested, 1400).ok());
}

TEST_CASE("Empty ids and oversized metadata are malformed", "[membership][codec]") {
  CHECK_FALSE(DecodePacket(EncodeSingle(Suspect{1, "", "a"}), 1400).ok());
  CHECK_FALSE(DecodePacket(EncodeSingle(Alive{1, "a", "", {}}), 1400).ok());
  Metadata big;
  big.build_version = std::string(kMaxMetadataBytes, 'x');
  CHECK(EncodedMetadataSize(big) > kMaxMetadataBytes);
  CHECK_FALSE(DecodePacket(EncodeSingle(Alive{1, "a", "b", big}), 1 << 20).ok());
}

TEST_CASE("Random bytes and random corruptions never crash the decoder", "[membership][codec]") {
  Random rng(20240601);
  std::vector<std::string> encoded;
  for (const Message& m : AllMessages()) encoded.push_back(EncodeMessage(m));
  std::string valid = EncodePacket(encoded);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      size_t n = rng.Uniform(300);
      for (size_t j = 0; j < n; ++j) bytes.push_back(static_cast<char>(rng.Uniform(256)));
      if (n > 0 && rng.Bernoulli(0.5)) bytes[0] = static_cast<char>(kWireVersion);
    } else {
      bytes = valid;
      int flips = 1 + static_cast<int>(rng.Uniform(4));
      for (int f = 0; f < flips; ++f) {
        bytes[rng.Uniform(bytes.size())] = static_cast<char>(rng.Uniform(256));
      }
    }
    auto decoded = DecodePacket(bytes, 1400);
    if (decoded.ok()) {
      accepted++;
      // Whatever decodes must re-encode to something that decodes the same way.
      std::vector<std::string> again;
      for (const Message& m : *decoded) again.push_back(EncodeMessage(m));
      auto twice = DecodePacket(EncodePacket(again), 1 << 20);
      REQUIRE(twice.ok());
      CHECK(*twice == *decoded);
    }
  }
  // Byte flips inside strings stay valid, so some corrupted packets decode; most must not.
  CHECK(accepted < 20000 / 2);
}

}  // namespace
}  // namespace exa::membership

TEST_CASE("AddressHost strips the port and keeps IPv6 brackets") {
  CHECK(exa::membership::AddressHost("10.0.0.7:7946") == "10.0.0.7");
  CHECK(exa::membership::AddressHost("[::1]:7946") == "[::1]");
  CHECK(exa::membership::AddressHost("node-3.rack2") == "node-3.rack2");
  CHECK(exa::membership::AddressHost("::1") == "::1");
}
