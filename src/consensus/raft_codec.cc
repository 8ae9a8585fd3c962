#include "consensus/raft_codec.h"

#include "consensus/raft_c.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/byte_io.h"

namespace exa::consensus {
namespace {

constexpr uint8_t kVersion = 1;

void PutEntries(ByteWriter& w, const raft_append_entries& a) {
  w.U32(a.n_entries);
  for (unsigned i = 0; i < a.n_entries; ++i) {
    const raft_entry& e = a.entries[i];
    w.U64(e.term);
    w.U16(e.type);
    w.Bytes(std::string_view(static_cast<const char*>(e.buf.base), e.buf.len));
  }
}

void PutConfiguration(ByteWriter& w, const raft_configuration& c) {
  w.U32(c.n);
  for (unsigned i = 0; i < c.n; ++i) {
    w.U64(c.servers[i].id);
    w.U8(static_cast<uint8_t>(c.servers[i].role));
    w.Bytes(c.servers[i].address != nullptr ? c.servers[i].address : "");
  }
}

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed raft message: ", std::string(what)));
}

// Entries share one raft_malloc'd batch, as libraft's own decoder leaves them.
absl::Status GetEntries(ByteReader& r, const CodecLimits& limits, raft_append_entries* a) {
  uint32_t n = r.U32();
  if (!r.ok() || n > limits.max_entries) return Malformed("entry count");
  struct Span {
    uint64_t term;
    uint16_t type;
    std::string_view data;
  };
  std::vector<Span> spans;
  spans.reserve(n);
  size_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Span s;
    s.term = r.U64();
    s.type = r.U16();
    s.data = r.Bytes(limits.max_message_bytes);
    if (!r.ok()) return Malformed("entries");
    if (s.type != RAFT_COMMAND && s.type != RAFT_BARRIER && s.type != RAFT_CHANGE) {
      return Malformed("entry type");
    }
    total += s.data.size();
    spans.push_back(s);
  }
  a->n_entries = n;
  a->entries = nullptr;
  if (n == 0) return absl::OkStatus();
  auto* entries = static_cast<raft_entry*>(raft_calloc(n, sizeof(raft_entry)));
  void* batch = raft_malloc(total > 0 ? total : 1);
  if (entries == nullptr || batch == nullptr) {
    raft_free(entries);
    raft_free(batch);
    return absl::ResourceExhaustedError("raft message: out of memory");
  }
  size_t offset = 0;
  for (uint32_t i = 0; i < n; ++i) {
    entries[i].term = spans[i].term;
    entries[i].type = spans[i].type;
    entries[i].batch = batch;
    entries[i].buf.len = spans[i].data.size();
    entries[i].buf.base = spans[i].data.empty() ? nullptr : static_cast<char*>(batch) + offset;
    if (!spans[i].data.empty())
      std::memcpy(entries[i].buf.base, spans[i].data.data(), spans[i].data.size());
    offset += spans[i].data.size();
  }
  a->entries = entries;
  return absl::OkStatus();
}

absl::Status GetConfiguration(ByteReader& r, const CodecLimits& limits, raft_configuration* c) {
  raft_configuration_init(c);
  uint32_t n = r.U32();
  if (!r.ok() || n > limits.max_servers) return Malformed("configuration size");
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t id = r.U64();
    uint8_t role = r.U8();
    std::string address(r.Bytes(limits.max_address_bytes));
    if (!r.ok() || id == 0 || role > RAFT_SPARE || address.empty()) {
      raft_configuration_close(c);
      return Malformed("configuration server");
    }
    if (raft_configuration_add(c, id, address.c_str(), role) != 0) {
      raft_configuration_close(c);
      return Malformed("configuration server (duplicate)");
    }
  }
  return absl::OkStatus();
}

absl::Status GetSnapshot(ByteReader& r, const CodecLimits& limits, raft_install_snapshot* s) {
  s->term = r.U64();
  s->last_index = r.U64();
  s->last_term = r.U64();
  s->conf_index = r.U64();
  if (!r.ok()) return Malformed("install snapshot");
  if (absl::Status st = GetConfiguration(r, limits, &s->conf); !st.ok()) return st;
  std::string_view data = r.Bytes(limits.max_message_bytes);
  if (!r.ok()) {
    raft_configuration_close(&s->conf);
    return Malformed("snapshot data");
  }
  s->data.len = data.size();
  s->data.base = raft_malloc(data.size() > 0 ? data.size() : 1);
  if (s->data.base == nullptr) {
    raft_configuration_close(&s->conf);
    return absl::ResourceExhaustedError("raft message: out of memory");
  }
  if (!data.empty()) std::memcpy(s->data.base, data.data(), data.size());
  return absl::OkStatus();
}

}  // namespace

std::string EncodeMessage(uint64_t from_id, std::string_view from_address, const raft_message& m) {
  ByteWriter w;
  w.U8(kVersion);
  w.U16(m.type);
  w.U64(from_id);
  w.Bytes(from_address);
  switch (m.type) {
    case RAFT_IO_REQUEST_VOTE: {
      const raft_request_vote& v = m.request_vote;
      w.U64(v.term);
      w.U64(v.candidate_id);
      w.U64(v.last_log_index);
      w.U64(v.last_log_term);
      w.U8(static_cast<uint8_t>((v.disrupt_leader ? 1 : 0) | (v.pre_vote ? 2 : 0)));
      break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT:
      w.U64(m.request_vote_result.term);
      w.U8(m.request_vote_result.vote_granted ? 1 : 0);
      w.U8(static_cast<uint8_t>(m.request_vote_result.pre_vote));
      break;
    case RAFT_IO_APPEND_ENTRIES:
      w.U64(m.append_entries.term);
      w.U64(m.append_entries.prev_log_index);
      w.U64(m.append_entries.prev_log_term);
      w.U64(m.append_entries.leader_commit);
      PutEntries(w, m.append_entries);
      break;
    case RAFT_IO_APPEND_ENTRIES_RESULT:
      w.U64(m.append_entries_result.term);
      w.U64(m.append_entries_result.rejected);
      w.U64(m.append_entries_result.last_log_index);
      break;
    case RAFT_IO_INSTALL_SNAPSHOT: {
      const raft_install_snapshot& s = m.install_snapshot;
      w.U64(s.term);
      w.U64(s.last_index);
      w.U64(s.last_term);
      w.U64(s.conf_index);
      PutConfiguration(w, s.conf);
      w.Bytes(std::string_view(static_cast<const char*>(s.data.base), s.data.len));
      break;
    }
    case RAFT_IO_TIMEOUT_NOW:
      w.U64(m.timeout_now.term);
      w.U64(m.timeout_now.last_log_index);
      w.U64(m.timeout_now.last_log_term);
      break;
    default:
      break;
  }
  return w.Take();
}

absl::Status DecodeMessage(std::string_view bytes, const CodecLimits& limits, raft_message* m,
                           std::string* from_address) {
  if (bytes.size() > limits.max_message_bytes) return Malformed("too large");
  ByteReader r(bytes);
  std::memset(static_cast<void*>(m), 0, sizeof(*m));
  if (r.U8() != kVersion) return Malformed("version");
  m->type = r.U16();
  m->server_id = r.U64();
  *from_address = std::string(r.Bytes(limits.max_address_bytes));
  if (!r.ok() || m->server_id == 0 || from_address->empty()) return Malformed("sender");
  m->server_address = from_address->c_str();
  switch (m->type) {
    case RAFT_IO_REQUEST_VOTE: {
      raft_request_vote& v = m->request_vote;
      v.term = r.U64();
      v.candidate_id = r.U64();
      v.last_log_index = r.U64();
      v.last_log_term = r.U64();
      uint8_t flags = r.U8();
      v.disrupt_leader = (flags & 1) != 0;
      v.pre_vote = (flags & 2) != 0;
      break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
      m->request_vote_result.term = r.U64();
      m->request_vote_result.vote_granted = r.U8() != 0;
      uint8_t pre_vote = r.U8();
      if (pre_vote > raft_tribool_false) r.Fail();
      m->request_vote_result.pre_vote = static_cast<raft_tribool>(pre_vote);
      break;
    }
    case RAFT_IO_APPEND_ENTRIES: {
      raft_append_entries& a = m->append_entries;
      a.term = r.U64();
      a.prev_log_index = r.U64();
      a.prev_log_term = r.U64();
      a.leader_commit = r.U64();
      if (!r.ok()) return Malformed("append entries");
      if (absl::Status s = GetEntries(r, limits, &a); !s.ok()) return s;
      break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT:
      m->append_entries_result.term = r.U64();
      m->append_entries_result.rejected = r.U64();
      m->append_entries_result.last_log_index = r.U64();
      break;
    case RAFT_IO_INSTALL_SNAPSHOT:
      if (absl::Status s = GetSnapshot(r, limits, &m->install_snapshot); !s.ok()) return s;
      break;
    case RAFT_IO_TIMEOUT_NOW:
      m->timeout_now.term = r.U64();
      m->timeout_now.last_log_index = r.U64();
      m->timeout_now.last_log_term = r.U64();
      break;
    default:
      return Malformed(absl::StrCat("type ", m->type));
  }
  if (!r.done()) {
    FreeDecoded(m);
    return Malformed(r.ok() ? "trailing bytes" : "truncated");
  }
  return absl::OkStatus();
}

void FreeDecoded(raft_message* m) {
  if (m->type == RAFT_IO_APPEND_ENTRIES && m->append_entries.entries != nullptr) {
    raft_free(m->append_entries.entries[0].batch);
    raft_free(m->append_entries.entries);
    m->append_entries.entries = nullptr;
    m->append_entries.n_entries = 0;
  } else if (m->type == RAFT_IO_INSTALL_SNAPSHOT) {
    raft_configuration_close(&m->install_snapshot.conf);
    raft_free(m->install_snapshot.data.base);
    m->install_snapshot.data.base = nullptr;
  }
}

}  // namespace exa::consensus
