#include "scheduler/legacy_store.h"

#include <rocksdb/db.h>

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "exaserve/v1/scheduler.pb.h"

namespace exa::scheduler {
namespace pb = exaserve::v1;
using absl::StrCat;

namespace {

StoreRecord FromProto(const pb::StoreRecordProto& r) {
  const pb::StoreVersion& v = r.version();
  return StoreRecord{r.key(), r.value(), r.deleted(),
                     Version{Hlc{v.wall_us(), v.logical()}, v.writer()}};
}

}  // namespace

// The records of the leaderless store a node kept before the Raft log, if any (read once).
absl::StatusOr<std::vector<StoreRecord>> ReadLegacyStore(const std::string& path) {
  std::vector<StoreRecord> records;
  if (!std::filesystem::exists(path)) return records;
  rocksdb::Options db_options;
  db_options.max_open_files = 64;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(db_options, path, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(StrCat("spec store ", path, " (before the Raft log): ",
                                         s.ToString(), "; move it away to start without it"));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    pb::StoreRecordProto r;
    if (!r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          StrCat("spec store ", path, ": record ", it->key().ToString(), " does not parse"));
    }
    StoreRecord record = FromProto(r);
    if (!record.deleted) records.push_back(std::move(record));
  }
  if (!it->status().ok()) {
    return absl::DataLossError(StrCat("spec store ", path, ": ", it->status().ToString()));
  }
  return records;
}

}  // namespace exa::scheduler
