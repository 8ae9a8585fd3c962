// libFuzzer entry for the gossip decoder: any bytes decode or fail with a Status; what decodes
// re-encodes to a packet that decodes to the same messages; and feeding the bytes to a live
// SWIM core (as datagram and as reliable) never crashes it. Build with clang
// -fsanitize=fuzzer,address to fuzz; ctest runs the committed corpus (corpus_test.cc).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/time/time.h"
#include "common/check.h"
#include "membership/codec.h"
#include "membership/swim_core.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace exa::membership;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto decoded = DecodePacket(bytes, 1 << 20);
  if (decoded.ok()) {
    std::vector<std::string> encoded;
    for (const Message& m : *decoded) encoded.push_back(EncodeMessage(m));
    auto again = DecodePacket(EncodePacket(encoded), 1 << 20);
    EXA_CHECK(again.ok() && *again == *decoded) << "decode(encode(x)) != x";
  }
  static SwimCore* core = [] {
    SwimCore::LocalNode self;
    self.id = "fuzz-self";
    self.address = "127.0.0.1:7946";
    return new SwimCore(Config::Lan(), self, 1, absl::UnixEpoch());
  }();
  static int64_t tick = 0;
  absl::Time now = absl::UnixEpoch() + absl::Milliseconds(++tick * 10);
  core->HandlePacket(now, "127.0.0.2:7946", bytes, Channel::kDatagram);
  core->HandlePacket(now, "127.0.0.2:7946", bytes, Channel::kReliable);
  core->Tick(now);
  core->TakePackets();
  core->TakeEvents();
  return 0;
}
