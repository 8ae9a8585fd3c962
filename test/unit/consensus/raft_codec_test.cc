#include "consensus/raft_codec.h"

#include "consensus/raft_c.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

namespace exa::consensus {
namespace {

TEST_CASE("an AppendEntries message decodes to what was encoded") {
  raft_entry entries[2] = {};
  char a[] = "first";
  entries[0] = {3, RAFT_COMMAND, {a, 5}, nullptr};
  entries[1] = {3, RAFT_BARRIER, {nullptr, 0}, nullptr};
  raft_message m{};
  m.type = RAFT_IO_APPEND_ENTRIES;
  m.server_id = 7;
  m.server_address = "s2";
  m.append_entries = {3, 10, 2, 9, entries, 2};
  std::string bytes = EncodeMessage(42, "s1", m);

  raft_message out;
  std::string from;
  REQUIRE(DecodeMessage(bytes, {}, &out, &from).ok());
  CHECK(from == "s1");
  CHECK(out.server_id == 42);
  CHECK(out.append_entries.term == 3);
  CHECK(out.append_entries.prev_log_index == 10);
  CHECK(out.append_entries.leader_commit == 9);
  REQUIRE(out.append_entries.n_entries == 2);
  CHECK(std::string(static_cast<char*>(out.append_entries.entries[0].buf.base), 5) == "first");
  CHECK(out.append_entries.entries[1].type == RAFT_BARRIER);
  FreeDecoded(&out);
}

TEST_CASE("an InstallSnapshot message carries its configuration and data") {
  raft_message m{};
  m.type = RAFT_IO_INSTALL_SNAPSHOT;
  raft_configuration_init(&m.install_snapshot.conf);
  raft_configuration_add(&m.install_snapshot.conf, 11, "s1", RAFT_VOTER);
  raft_configuration_add(&m.install_snapshot.conf, 12, "s2", RAFT_SPARE);
  char data[] = "state";
  m.install_snapshot.data = {data, 5};
  m.install_snapshot.last_index = 100;
  std::string bytes = EncodeMessage(1, "s1", m);
  raft_configuration_close(&m.install_snapshot.conf);

  raft_message out;
  std::string from;
  REQUIRE(DecodeMessage(bytes, {}, &out, &from).ok());
  CHECK(out.install_snapshot.last_index == 100);
  REQUIRE(out.install_snapshot.conf.n == 2);
  CHECK(std::string(out.install_snapshot.conf.servers[1].address) == "s2");
  CHECK(out.install_snapshot.conf.servers[1].role == RAFT_SPARE);
  CHECK(std::string(static_cast<char*>(out.install_snapshot.data.base), 5) == "state");
  FreeDecoded(&out);
}

TEST_CASE("bad bytes are refused, never trusted") {
  raft_message m{};
  m.type = RAFT_IO_REQUEST_VOTE;
  m.request_vote = {5, 9, 100, 4, false, true};
  std::string good = EncodeMessage(9, "s9", m);
  raft_message out;
  std::string from;
  REQUIRE(DecodeMessage(good, {}, &out, &from).ok());
  CHECK(out.request_vote.pre_vote);

  for (size_t cut = 0; cut < good.size(); ++cut) {
    CHECK_FALSE(DecodeMessage(good.substr(0, cut), {}, &out, &from).ok());
  }
  CHECK_FALSE(DecodeMessage(good + "x", {}, &out, &from).ok());
  std::string bad_type = good;
  bad_type[1] = 99;
  CHECK_FALSE(DecodeMessage(bad_type, {}, &out, &from).ok());

  // Random bytes and random mutations of a valid message: refused or decoded, never a crash.
  std::mt19937 rng(1);
  raft_entry e{1, RAFT_COMMAND, {const_cast<char*>("abc"), 3}, nullptr};
  raft_message append{};
  append.type = RAFT_IO_APPEND_ENTRIES;
  append.append_entries = {1, 0, 0, 0, &e, 1};
  std::string base = EncodeMessage(1, "s1", append);
  for (int i = 0; i < 20000; ++i) {
    std::string mutated = base;
    for (int k = 0; k < 3; ++k) mutated[rng() % mutated.size()] = static_cast<char>(rng());
    if (DecodeMessage(mutated, {}, &out, &from).ok()) FreeDecoded(&out);
  }
}

TEST_CASE("a message over the size limit is refused") {
  CodecLimits limits;
  limits.max_message_bytes = 16;
  raft_message out;
  std::string from;
  CHECK_FALSE(DecodeMessage(std::string(17, '\1'), limits, &out, &from).ok());
}

}  // namespace
}  // namespace exa::consensus
