// The gossip corpus's seeds are valid packets, so their mutations (corpus_runner.cc) start from
// real messages. With EXA_WRITE_GOSSIP_CORPUS=DIR it first (re)writes the seed corpus from every
// message kind.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "fuzz_corpus_params.h"
#include "membership/codec.h"
#include "support/fuzz_corpus.h"

namespace exa::membership {
namespace {

std::vector<std::pair<std::string, std::string>> Seeds() {
  Metadata md;
  md.roles = {"inference", "gateway"};
  md.rack = "r7";
  md.nvlink_domain = "n7/nvl0";
  md.gpus = {8, 81920, "H100-SXM"};
  md.taints = {"burn-in-failed"};
  md.build_version = "0.1.0";
  md.replicas = {12, 11};
  PushPull pp{9, true, false, "node-a", "10.0.0.1:7946", {}};
  for (int i = 0; i < 3; ++i) {
    pp.members.push_back({"node-" + std::to_string(i), "10.0.0." + std::to_string(i) + ":7946",
                          static_cast<uint32_t>(i), static_cast<MemberState>(i), md});
  }
  std::vector<std::pair<std::string, Message>> messages = {
      {"ping", Ping{1, "node-b", "node-a", "10.0.0.1:7946"}},
      {"ping_req", IndirectPing{2, "node-c", "10.0.0.3:7946", true, "node-a", "10.0.0.1:7946"}},
      {"ack", Ack{3}},
      {"nack", Nack{4}},
      {"suspect", Suspect{5, "node-c", "node-a"}},
      {"alive", Alive{6, "node-d", "10.0.0.4:7946", md}},
      {"dead", Dead{7, "node-e", "node-a"}},
      {"leave", Dead{8, "node-f", "node-f"}},
      {"push_pull", pp},
  };
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::string> all;
  for (const auto& [name, m] : messages) {
    out.emplace_back(name, EncodeSingle(m));
    all.push_back(EncodeMessage(m));
  }
  out.emplace_back("compound_all", EncodePacket(all));
  return out;
}

TEST_CASE("Gossip fuzz seeds are valid packets", "[fuzz]") {
  namespace fs = std::filesystem;
  if (const char* dir = std::getenv("EXA_WRITE_GOSSIP_CORPUS")) {
    for (const auto& [name, bytes] : Seeds()) {
      std::ofstream(fs::path(dir) / (name + ".bin"), std::ios::binary) << bytes;
    }
  }
  int files = 0, decoded = 0;
  for (const auto& [name, seed] : testing::ReadCorpus(testing::fuzz_params::kCorpusDir)) {
    ++files;
    if (DecodePacket(seed, 1 << 20).ok()) ++decoded;
  }
  CHECK(files >= 10);
  CHECK(decoded == files);  // the seeds themselves are valid packets
}

}  // namespace
}  // namespace exa::membership
