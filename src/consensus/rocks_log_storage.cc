#include "consensus/rocks_log_storage.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "absl/strings/str_cat.h"
#include "common/byte_io.h"

namespace exa::consensus {
namespace {

constexpr char kMeta[] = "meta";
constexpr char kSnapshot[] = "snap";
constexpr uint8_t kSnapshotVersion = 1;

std::string EntryKey(uint64_t index) {
  std::string key = "e";
  for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((index >> (8 * i)) & 0xff));
  return key;
}

uint64_t IndexOf(const rocksdb::Slice& key) {
  uint64_t index = 0;
  for (size_t i = 1; i < 9 && i < key.size(); ++i)
    index = (index << 8) | static_cast<uint8_t>(key[i]);
  return index;
}

rocksdb::WriteOptions Sync() {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return wo;
}

}  // namespace

std::string EncodeSnapshot(const StoredSnapshot& s) {
  ByteWriter w;
  w.U8(kSnapshotVersion);
  w.U64(s.index);
  w.U64(s.term);
  w.U64(s.configuration_index);
  w.U32(static_cast<uint32_t>(s.configuration.size()));
  for (const StoredServer& server : s.configuration) {
    w.U64(server.id);
    w.U8(static_cast<uint8_t>(server.role));
    w.Bytes(server.address);
  }
  w.Bytes(s.data);
  return w.Take();
}

absl::StatusOr<StoredSnapshot> DecodeSnapshot(std::string_view bytes) {
  ByteReader r(bytes);
  if (r.U8() != kSnapshotVersion) return absl::DataLossError("raft snapshot: unknown version");
  StoredSnapshot s;
  s.index = r.U64();
  s.term = r.U64();
  s.configuration_index = r.U64();
  uint32_t n = r.U32();
  for (uint32_t i = 0; i < n && r.ok() && i < 1024; ++i) {
    StoredServer server;
    server.id = r.U64();
    server.role = r.U8();
    server.address = std::string(r.Bytes(255));
    s.configuration.push_back(std::move(server));
  }
  s.data = std::string(r.Bytes(bytes.size()));
  if (!r.done()) return absl::DataLossError("raft snapshot: malformed");
  return s;
}

RocksLogStorage::RocksLogStorage(std::string path, std::unique_ptr<rocksdb::DB> db)
    : path_(std::move(path)), db_(std::move(db)) {}

RocksLogStorage::~RocksLogStorage() = default;

absl::StatusOr<std::unique_ptr<RocksLogStorage>> RocksLogStorage::Open(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 64;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("raft log ", path, ": ", s.ToString(), " (node.data_dir sets the folder)"));
  }
  std::unique_ptr<RocksLogStorage> storage(
      new RocksLogStorage(path, std::unique_ptr<rocksdb::DB>(raw)));
  absl::StatusOr<StoredState> state = storage->Load();  // sets the indexes
  if (!state.ok()) return state.status();
  return storage;
}

absl::StatusOr<StoredState> RocksLogStorage::Load() {
  StoredState state;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kMeta, &value);
  if (s.ok()) {
    ByteReader r(value);
    state.term = r.U64();
    state.voted_for = r.U64();
    if (!r.done()) return absl::DataLossError(absl::StrCat("raft log ", path_, ": bad term/vote"));
  } else if (!s.IsNotFound()) {
    return absl::UnavailableError(absl::StrCat("raft log ", path_, ": ", s.ToString()));
  }
  s = db_->Get(rocksdb::ReadOptions(), kSnapshot, &value);
  if (s.ok()) {
    absl::StatusOr<StoredSnapshot> snapshot = DecodeSnapshot(value);
    if (!snapshot.ok())
      return absl::DataLossError(
          absl::StrCat("raft log ", path_, ": ", snapshot.status().message()));
    state.first_index = snapshot->index + 1;
    state.snapshot = std::move(*snapshot);
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  bool first = true;
  for (it->Seek("e"); it->Valid() && it->key().starts_with("e"); it->Next()) {
    uint64_t index = IndexOf(it->key());
    if (first) state.first_index = index;
    if (index != state.first_index + state.entries.size()) {
      return absl::DataLossError(absl::StrCat("raft log ", path_, ": a gap before entry ", index));
    }
    first = false;
    ByteReader r(std::string_view(it->value().data(), it->value().size()));
    StoredEntry entry;
    entry.term = r.U64();
    entry.type = r.U16();
    entry.data = std::string(r.Raw(r.remaining()));
    if (!r.done())
      return absl::DataLossError(absl::StrCat("raft log ", path_, ": bad entry ", index));
    state.entries.push_back(std::move(entry));
  }
  if (!it->status().ok())
    return absl::UnavailableError(absl::StrCat("raft log ", path_, ": ", it->status().ToString()));
  first_index_ = state.first_index;
  next_index_ = state.first_index + state.entries.size();
  empty_ = state.term == 0 && state.entries.empty() && !state.snapshot;
  return state;
}

absl::Status RocksLogStorage::SetTermVote(uint64_t term, uint64_t voted_for) {
  ByteWriter w;
  w.U64(term);
  w.U64(voted_for);
  rocksdb::Status s = db_->Put(Sync(), kMeta, w.Take());
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("raft log ", path_, ": ", s.ToString()));
  empty_ = false;
  return absl::OkStatus();
}

absl::Status RocksLogStorage::Append(uint64_t first_index,
                                     const std::vector<StoredEntry>& entries) {
  if (first_index < first_index_ || first_index > next_index_) {
    return absl::InternalError(absl::StrCat("raft log ", path_, ": append at ", first_index,
                                            " outside [", first_index_, ", ", next_index_, "]"));
  }
  rocksdb::WriteBatch batch;
  if (first_index < next_index_) batch.DeleteRange(EntryKey(first_index), "f");
  for (size_t i = 0; i < entries.size(); ++i) {
    ByteWriter w;
    w.U64(entries[i].term);
    w.U16(entries[i].type);
    w.Raw(entries[i].data);
    batch.Put(EntryKey(first_index + i), w.Take());
  }
  rocksdb::Status s = db_->Write(Sync(), &batch);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("raft log ", path_, ": ", s.ToString()));
  next_index_ = first_index + entries.size();
  empty_ = false;
  return absl::OkStatus();
}

absl::Status RocksLogStorage::TruncateFrom(uint64_t index) {
  rocksdb::Status s = db_->DeleteRange(Sync(), db_->DefaultColumnFamily(), EntryKey(index), "f");
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("raft log ", path_, ": ", s.ToString()));
  next_index_ = std::max(first_index_, std::min(next_index_, index));
  return absl::OkStatus();
}

absl::Status RocksLogStorage::PutSnapshot(const StoredSnapshot& snapshot, uint64_t trailing) {
  StoredState bounds;  // DropCoveredEntries on the indexes alone
  bounds.first_index = first_index_;
  bounds.entries.resize(next_index_ - first_index_);
  DropCoveredEntries(bounds, snapshot.index, trailing);
  rocksdb::WriteBatch batch;
  batch.Put(kSnapshot, EncodeSnapshot(snapshot));
  if (trailing == 0) {
    batch.DeleteRange("e", "f");
  } else if (bounds.first_index > first_index_) {
    batch.DeleteRange(EntryKey(0), EntryKey(bounds.first_index));
  }
  rocksdb::Status s = db_->Write(Sync(), &batch);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("raft log ", path_, ": ", s.ToString()));
  first_index_ = bounds.first_index;
  next_index_ = trailing == 0 ? bounds.first_index : next_index_;
  empty_ = false;
  return absl::OkStatus();
}

}  // namespace exa::consensus
