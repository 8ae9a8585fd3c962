#include "scheduler/replicated_store.h"

#include <algorithm>

namespace exa::scheduler {

Hlc HybridClock::Now(absl::Time physical) {
  int64_t wall_us = absl::ToUnixMicros(physical);
  if (wall_us > last_.wall_us) {
    last_ = Hlc{wall_us, 0};
  } else {
    last_.logical++;
  }
  return last_;
}

void HybridClock::Observe(const Hlc& remote) { last_ = std::max(last_, remote); }

ReplicatedStore::ReplicatedStore(std::string self_id, StoreConfig config)
    : self_(std::move(self_id)), config_(config), members_{self_} {}

void ReplicatedStore::Restore(const std::vector<StoreRecord>& records) {
  for (const StoreRecord& r : records) Apply(r);
  persist_.clear();
}

void ReplicatedStore::SetMembers(absl::Time now, std::vector<std::string> members) {
  if (std::find(members.begin(), members.end(), self_) == members.end()) members.push_back(self_);
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  if (members == members_) return;
  members_ = std::move(members);
  // A new member may lack records and a returning one may hold newer ones: repair now.
  SendDigests();
  next_anti_entropy_ = now + config_.anti_entropy_interval;
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = Settle(it->first, it->second) ? pending_.erase(it) : std::next(it);
  }
}

std::optional<uint64_t> ReplicatedStore::Put(absl::Time now, const std::string& key,
                                             const std::string& value) {
  return Write(now, key, value, false);
}

std::optional<uint64_t> ReplicatedStore::Delete(absl::Time now, const std::string& key) {
  return Write(now, key, "", true);
}

std::optional<uint64_t> ReplicatedStore::Write(absl::Time now, const std::string& key,
                                               const std::string& value, bool deleted) {
  if (key.empty() || value.size() > config_.max_value_bytes) return std::nullopt;
  if (pending_.size() >= config_.max_pending_writes) return std::nullopt;
  if (!records_.count(key) && records_.size() >= config_.max_records) return std::nullopt;
  StoreRecord r{key, value, deleted, Version{clock_.Now(now), self_}};
  Apply(r);
  uint64_t id = next_id_++;
  Pending p{key, r.version, {self_}, now + config_.write_timeout, now + config_.retry_interval};
  for (const std::string& m : members_) {
    if (m != self_) out_.push_back({m, StoreMessage{StoreMessage::Type::kPut, {r}, {}, {}}});
  }
  // A lone scheduler is its own majority.
  if (!Settle(id, p)) pending_.emplace(id, std::move(p));
  return id;
}

bool ReplicatedStore::Apply(const StoreRecord& r) {
  clock_.Observe(r.version.hlc);
  auto it = records_.find(r.key);
  if (it == records_.end()) {
    if (records_.size() >= config_.max_records) return false;
    records_.emplace(r.key, r);
  } else if (r.version > it->second.version) {
    it->second = r;
  } else {
    return false;
  }
  persist_.push_back(r);
  return true;
}

bool ReplicatedStore::Settle(uint64_t id, Pending& p) {
  if (!p.acknowledged && HeldByMajority(p)) {
    p.acknowledged = true;
    acknowledged_.push_back(id);
  }
  return std::all_of(members_.begin(), members_.end(),
                     [&p](const std::string& m) { return p.holders.count(m) > 0; });
}

bool ReplicatedStore::HeldByMajority(const Pending& p) const {
  size_t holders = 0;
  for (const std::string& h : p.holders) {
    holders += std::binary_search(members_.begin(), members_.end(), h) ? 1 : 0;
  }
  return holders >= Majority();
}

void ReplicatedStore::Handle(absl::Time now, const std::string& from, const StoreMessage& m) {
  using Type = StoreMessage::Type;
  switch (m.type) {
    case Type::kPut: {
      StoreMessage ack{Type::kPutAck, {}, {}, {}};
      for (const StoreRecord& r : m.records) {
        if (r.key.empty() || r.value.size() > config_.max_value_bytes) continue;
        Apply(r);
        auto it = records_.find(r.key);
        // What this node now holds for the key: at least as new as what arrived.
        if (it != records_.end()) ack.versions.emplace_back(r.key, it->second.version);
      }
      if (!ack.versions.empty()) out_.push_back({from, std::move(ack)});
      break;
    }
    case Type::kPutAck:
      for (auto it = pending_.begin(); it != pending_.end();) {
        Pending& p = it->second;
        for (const auto& [key, version] : m.versions) {
          if (key == p.key && version >= p.version) p.holders.insert(from);
        }
        it = Settle(it->first, p) ? pending_.erase(it) : std::next(it);
      }
      break;
    case Type::kDigest: {
      std::map<std::string, Version> theirs(m.versions.begin(), m.versions.end());
      StoreMessage put{Type::kPut, {}, {}, {}};
      for (const auto& [key, r] : records_) {
        auto it = theirs.find(key);
        if (it == theirs.end() || it->second < r.version) put.records.push_back(r);
      }
      StoreMessage pull{Type::kPull, {}, {}, {}};
      for (const auto& [key, version] : theirs) {
        auto it = records_.find(key);
        if (it == records_.end() || it->second.version < version) pull.keys.push_back(key);
      }
      if (!put.records.empty()) out_.push_back({from, std::move(put)});
      if (!pull.keys.empty()) out_.push_back({from, std::move(pull)});
      break;
    }
    case Type::kPull: {
      StoreMessage put{Type::kPut, {}, {}, {}};
      for (const std::string& key : m.keys) {
        auto it = records_.find(key);
        if (it != records_.end()) put.records.push_back(it->second);
      }
      if (!put.records.empty()) out_.push_back({from, std::move(put)});
      break;
    }
  }
  (void)now;
}

void ReplicatedStore::SendDigests() {
  StoreMessage digest{StoreMessage::Type::kDigest, {}, {}, {}};
  for (const auto& [key, r] : records_) digest.versions.emplace_back(key, r.version);
  for (const std::string& m : members_) {
    if (m != self_) out_.push_back({m, digest});
  }
}

void ReplicatedStore::Tick(absl::Time now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    if (now >= p.deadline) {
      // Past the deadline an acknowledged write is left to anti-entropy.
      if (!p.acknowledged) failed_.push_back(it->first);
      it = pending_.erase(it);
      continue;
    }
    if (now >= p.next_retry) {
      p.next_retry = now + config_.retry_interval;
      auto r = records_.find(p.key);
      if (r != records_.end()) {
        for (const std::string& m : members_) {
          if (!p.holders.count(m)) {
            out_.push_back({m, StoreMessage{StoreMessage::Type::kPut, {r->second}, {}, {}}});
          }
        }
      }
    }
    ++it;
  }
  if (now >= next_anti_entropy_) {
    SendDigests();
    next_anti_entropy_ = now + config_.anti_entropy_interval;
  }
}

absl::Time ReplicatedStore::NextTick() const {
  absl::Time next = next_anti_entropy_;
  for (const auto& [id, p] : pending_) next = std::min({next, p.next_retry, p.deadline});
  return next;
}

std::vector<OutStoreMessage> ReplicatedStore::TakeMessages() { return std::exchange(out_, {}); }
std::vector<StoreRecord> ReplicatedStore::TakePersist() { return std::exchange(persist_, {}); }
std::vector<uint64_t> ReplicatedStore::TakeAcknowledged() {
  return std::exchange(acknowledged_, {});
}
std::vector<uint64_t> ReplicatedStore::TakeFailed() { return std::exchange(failed_, {}); }

const StoreRecord* ReplicatedStore::Get(const std::string& key) const {
  auto it = records_.find(key);
  if (it == records_.end() || it->second.deleted) return nullptr;
  return &it->second;
}

std::vector<StoreRecord> ReplicatedStore::Live() const {
  std::vector<StoreRecord> out;
  for (const auto& [key, r] : records_) {
    if (!r.deleted) out.push_back(r);
  }
  return out;
}

}  // namespace exa::scheduler
