#include "raft_history/history.h"

#include <time.h>

#include <chrono>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "support/linearizability.h"

namespace exa::raft_history {
namespace {

using json = nlohmann::json;
using testing::KvOperation;

// Bounds on what a history file may hold: a 10-minute run at a few hundred operations a second
// is under a million events; a line is one small JSON object.
constexpr size_t kMaxEvents = 20'000'000;
constexpr size_t kMaxLineBytes = 64 * 1024;

absl::StatusOr<OpKind> ParseKind(const std::string& s) {
  if (s == "put") return OpKind::kPut;
  if (s == "delete") return OpKind::kDelete;
  if (s == "read") return OpKind::kRead;
  return absl::InvalidArgumentError(absl::StrCat("f \"", s, "\": expected put, delete or read"));
}

absl::StatusOr<Outcome> ParseOutcome(const std::string& s) {
  if (s == "ok") return Outcome::kOk;
  if (s == "fail") return Outcome::kFail;
  if (s == "unknown") return Outcome::kUnknown;
  return absl::InvalidArgumentError(absl::StrCat("type \"", s, "\": expected ok, fail, unknown"));
}

struct Parsed {
  std::map<uint64_t, Invocation> invocations;
  std::map<uint64_t, Completion> completions;
};

absl::Status ParseLine(const json& j, Parsed& out) {
  const std::string type = j.at("type").get<std::string>();
  const uint64_t op = j.at("op").get<uint64_t>();
  if (type == "invoke") {
    Invocation inv;
    inv.op = op;
    inv.client = j.at("client").get<int>();
    absl::StatusOr<OpKind> kind = ParseKind(j.at("f").get<std::string>());
    if (!kind.ok()) return kind.status();
    inv.kind = *kind;
    inv.key = j.at("key").get<std::string>();
    inv.value = j.value("value", "");
    inv.node = j.value("node", "");
    inv.final_read = j.value("final", false);
    inv.time_ns = j.at("time").get<int64_t>();
    if (!out.invocations.emplace(op, std::move(inv)).second) {
      return absl::InvalidArgumentError(absl::StrCat("op ", op, " invoked twice"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<Outcome> outcome = ParseOutcome(type);
  if (!outcome.ok()) return outcome.status();
  Completion done;
  done.op = op;
  done.outcome = *outcome;
  if (j.contains("value") && !j["value"].is_null()) done.value = j["value"].get<std::string>();
  done.version = j.value("version", uint64_t{0});
  done.error = j.value("error", "");
  done.time_ns = j.at("time").get<int64_t>();
  if (!out.completions.emplace(op, std::move(done)).second) {
    return absl::InvalidArgumentError(absl::StrCat("op ", op, " completed twice"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Parsed> ReadEvents(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  Parsed parsed;
  size_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    if (line_number > kMaxEvents || line.size() > kMaxLineBytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": past the limits (",
                                                     kMaxEvents, " events of ", kMaxLineBytes,
                                                     " bytes)"));
    }
    json j = json::parse(line, nullptr, false);
    absl::Status s = j.is_object() ? absl::OkStatus() : absl::InvalidArgumentError("not JSON");
    if (s.ok()) {
      try {
        s = ParseLine(j, parsed);
      } catch (const json::exception& e) {
        s = absl::InvalidArgumentError(e.what());
      }
    }
    if (!s.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": ", s.message()));
  }
  return parsed;
}

struct Counts {
  size_t ok = 0, fail = 0, unknown = 0, reads = 0, writes = 0, final_reads = 0;
};

// The checker's view of one invocation, or nullopt when it tells nothing: a failed write
// changed nothing, a read without an answer observed nothing.
std::optional<KvOperation> ToOperation(const Invocation& inv, const Completion* done,
                                       Counts& counts) {
  const Outcome outcome = done ? done->outcome : Outcome::kUnknown;
  counts.ok += outcome == Outcome::kOk;
  counts.fail += outcome == Outcome::kFail;
  counts.unknown += outcome == Outcome::kUnknown;
  KvOperation op;
  op.key = inv.key;
  op.invoke = inv.time_ns;
  op.response = done ? done->time_ns : 0;
  if (inv.kind == OpKind::kRead) {
    ++counts.reads;
    if (outcome != Outcome::kOk) return std::nullopt;
    counts.final_reads += inv.final_read;
    op.kind = KvOperation::Kind::kRead;
    op.value = done->value;
    op.version = done->value ? done->version : 0;
    return op;
  }
  ++counts.writes;
  if (outcome == Outcome::kFail) return std::nullopt;
  op.unknown = outcome == Outcome::kUnknown;
  if (inv.kind == OpKind::kPut) {
    op.kind = KvOperation::Kind::kPut;
    op.value = inv.value;
  } else {
    op.kind = KvOperation::Kind::kDelete;
  }
  return op;
}

}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kPut:
      return "put";
    case OpKind::kDelete:
      return "delete";
    case OpKind::kRead:
      return "read";
  }
  return "?";
}

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kFail:
      return "fail";
    case Outcome::kUnknown:
      return "unknown";
  }
  return "?";
}

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

absl::StatusOr<std::unique_ptr<HistoryWriter>> HistoryWriter::Open(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open for append"));
  return std::unique_ptr<HistoryWriter>(new HistoryWriter(f));
}

HistoryWriter::~HistoryWriter() {
  absl::MutexLock lock(&mu_);
  std::fclose(file_);
}

void HistoryWriter::WriteLine(const std::string& line) {
  absl::MutexLock lock(&mu_);
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

void HistoryWriter::Invoke(const Invocation& inv) {
  json j = {{"type", "invoke"},          {"op", inv.op},   {"client", inv.client},
            {"f", OpKindName(inv.kind)}, {"key", inv.key}, {"node", inv.node},
            {"time", inv.time_ns}};
  if (inv.kind == OpKind::kPut) j["value"] = inv.value;
  if (inv.final_read) j["final"] = true;
  WriteLine(j.dump());
}

void HistoryWriter::Complete(const Completion& done) {
  json j = {{"type", OutcomeName(done.outcome)}, {"op", done.op}, {"time", done.time_ns}};
  if (done.outcome == Outcome::kOk) {
    j["value"] = done.value ? json(*done.value) : json(nullptr);
    if (done.version != 0) j["version"] = done.version;
  }
  if (!done.error.empty()) j["error"] = done.error;
  WriteLine(j.dump());
}

absl::StatusOr<json> CheckHistory(const std::string& path, const CheckOptions& options) {
  absl::StatusOr<Parsed> parsed = ReadEvents(path);
  if (!parsed.ok()) return parsed.status();
  Counts counts;
  std::map<std::string, std::vector<KvOperation>> by_key;
  std::map<std::string, uint64_t> version_of;  // value → the version reads saw it at
  for (const auto& [op, inv] : parsed->invocations) {
    auto c = parsed->completions.find(op);
    std::optional<KvOperation> kv =
        ToOperation(inv, c == parsed->completions.end() ? nullptr : &c->second, counts);
    if (!kv) continue;
    if (kv->kind == KvOperation::Kind::kRead && kv->value) version_of[*kv->value] = kv->version;
    by_key[inv.key].push_back(std::move(*kv));
  }
  // Apply answers no version: an acknowledged put gets the one reads saw its value at (a value
  // never read leaves 0, which no read can contradict).
  for (auto& [key, ops] : by_key) {
    for (KvOperation& op : ops) {
      if (op.kind != KvOperation::Kind::kPut || op.unknown) continue;
      auto v = version_of.find(*op.value);
      if (v != version_of.end()) op.version = v->second;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  json keys = json::object();
  size_t violations = 0, inconclusive = 0, operations = 0;
  for (const auto& [key, ops] : by_key) {
    testing::LinearizabilityResult r = testing::CheckLinearizable(ops, options.max_steps);
    operations += ops.size();
    // A search out of budget proves nothing either way: counted apart, and still not a pass.
    const bool gave_up = !r.ok && r.message.rfind("search gave up", 0) == 0;
    violations += !r.ok && !gave_up;
    inconclusive += gave_up;
    keys[key] = {{"operations", ops.size()}, {"ok", r.ok}};
    if (!r.ok) keys[key]["why"] = r.message;
  }
  const double check_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return json{{"history", path},
              {"events", parsed->invocations.size()},
              {"operations", operations},
              {"ok", counts.ok},
              {"fail", counts.fail},
              {"unknown", counts.unknown},
              {"reads", counts.reads},
              {"writes", counts.writes},
              {"final_reads", counts.final_reads},
              {"keys", keys},
              {"violations", violations},
              {"inconclusive", inconclusive},
              {"check_ms", static_cast<int64_t>(check_ms)}};
}

}  // namespace exa::raft_history
