// Test tiers: a WeightsSource served in-process (no gRPC), and wrappers that fail, corrupt or
// count, so fetcher and rack cache behaviour can be driven exactly.
#pragma once

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "common/strings.h"
#include "support/temp_dir.h"
#include "weights/tier.h"

namespace exa::weights::testing {

class SourceTier : public Tier {
 public:
  SourceTier(std::string name, WeightsSource& source) : name_(std::move(name)), source_(source) {}
  const std::string& name() const override { return name_; }
  absl::StatusOr<std::vector<ModelRef>> ListModels(absl::Duration) override {
    if (down) return absl::UnavailableError(name_ + ": down");
    return source_.ListModels();
  }
  absl::StatusOr<Manifest> GetManifest(const std::string& name, const std::string& version,
                                       absl::Duration) override {
    if (down) return absl::UnavailableError(name_ + ": down");
    return source_.GetManifest(name, version);
  }
  absl::Status FetchChunk(const ChunkKey& key, uint64_t offset, uint64_t chunk_size, absl::Duration,
                          const ChunkSink& sink) override {
    ++fetches;
    if (on_fetch) on_fetch(key);
    if (down) return absl::UnavailableError(name_ + ": down");
    auto reader = source_.OpenChunk(key, {});
    if (!reader.ok()) return reader.status();
    if ((*reader)->size() != chunk_size) return absl::DataLossError("size mismatch");
    std::string buf;
    for (uint64_t at = offset; at < chunk_size;) {
      if (fail_after_bytes >= 0 && sent >= fail_after_bytes) {
        return absl::UnavailableError(name_ + ": connection reset");
      }
      buf.resize(static_cast<size_t>(std::min<uint64_t>(piece_bytes, chunk_size - at)));
      auto n = (*reader)->ReadAt(at, buf.data(), buf.size());
      if (!n.ok()) return n.status();
      if (corrupt) buf[0] ^= 0x01;
      std::string_view piece = buf;
      absl::Status s = sink(at, {&piece, 1});
      if (!s.ok()) return s;
      at += *n;
      sent += static_cast<int64_t>(*n);
    }
    return absl::OkStatus();
  }

  std::atomic<bool> down{false};
  std::atomic<bool> corrupt{false};
  std::atomic<int64_t> fail_after_bytes{-1};
  std::atomic<int64_t> sent{0};
  std::atomic<int> fetches{0};
  size_t piece_bytes = 4096;
  std::function<void(const ChunkKey&)> on_fetch;

 private:
  std::string name_;
  WeightsSource& source_;
};

// A model directory of `files` files of pseudo-random bytes (seeded), sizes as given.
inline void WriteModelDir(const std::filesystem::path& dir, const std::vector<uint64_t>& sizes,
                          uint32_t seed = 1) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string bytes(sizes[i], '\0');
    for (auto& b : bytes) b = static_cast<char>(rng());
    std::ofstream(dir / StrCat("model-0000", i + 1, ".safetensors"), std::ios::binary) << bytes;
  }
  std::ofstream(dir / "config.json") << "{\"hidden_size\": 8}\n";
}

inline void FlipByte(const std::filesystem::path& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

using exa::testing::TempDir;

}  // namespace exa::weights::testing
