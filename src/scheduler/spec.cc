#include "scheduler/spec.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "cluster/label_rule.h"  // the reserved label prefix (a constant)
#include "cluster/model_names.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "config/schema.h"
#include "scheduler/spec_reader.h"
#include "yaml-cpp/yaml.h"

namespace exa::scheduler {
namespace {

using spec_internal::ParseFraction;
using spec_internal::Reader;

// Documents of a multi-document file, each with its first line. yaml-cpp 0.7's LoadAll loops
// allocating without end on a stray top-level ',' after a document (found by the fuzz corpus),
// so the file is split on `---` lines here and each document is loaded alone.
std::vector<std::pair<int, std::string>> SplitDocuments(std::string_view text) {
  std::vector<std::pair<int, std::string>> docs(1, {0, ""});
  int line = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view l = text.substr(0, end == std::string_view::npos ? text.size() : end + 1);
    text.remove_prefix(l.size());
    bool separator = l.substr(0, 3) == "---" &&
                     (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\n' || l[3] == '\r');
    // "..." ends a document; what follows it is another (yaml-cpp's Load would drop it).
    const bool document_end = l.substr(0, 3) == "..." && StripWhitespace(l.substr(3)).empty();
    if (document_end) {
      docs.emplace_back(line + 1, "");
    } else if (separator) {
      // The rest of a separator line ("--- {a: b}") belongs to the new document.
      docs.emplace_back(line, std::string(l.substr(3)));
    } else {
      docs.back().second.append(l);
    }
    ++line;
  }
  return docs;
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  if (name.front() == '-' || name.back() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

bool ValidLabelPart(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == '/';
  });
}

bool ValidModelName(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == '/' || c == '@' || c == ':' || c == '+';
  });
}

// Well-formed UTF-8 without control characters other than tab and newline: probe text is sent
// to the model as a prompt and printed by the CLI.
bool ValidText(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) return false;
      ++i;
      continue;
    }
    size_t extra = c >= 0xc2 && c <= 0xdf   ? 1
                   : c >= 0xe0 && c <= 0xef ? 2
                   : c >= 0xf0 && c <= 0xf4 ? 3
                                            : 0;
    if (extra == 0 || s.size() - i <= extra) return false;
    unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    // Overlong forms, UTF-16 surrogates and code points above U+10FFFF.
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) ||
        (c == 0xf4 && c1 >= 0x90)) {
      return false;
    }
    for (size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

constexpr std::string_view kNameRule =
    "expected 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'";

absl::Status ParseResources(const Reader& r, const YAML::Node& n, ResourcesSpec& out) {
  EXA_RETURN_IF_ERROR(r.CheckMap(n, "spec.resources", {"gpu", "memory"}));
  if (n["gpu"]) {
    EXA_ASSIGN_OR_RETURN(out.gpu, r.Int(n["gpu"], "spec.resources.gpu", 1, kMaxGpusPerReplica));
  }
  if (n["memory"]) {
    EXA_ASSIGN_OR_RETURN(out.memory_bytes, r.Bytes(n["memory"], "spec.resources.memory"));
    if (out.memory_bytes == 0) {
      return r.Error(n["memory"], "spec.resources.memory",
                     "\"0\": must be positive (omit it to let the memory planner decide)");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTopology(const Reader& r, const YAML::Node& n, TopologySpec& out) {
  EXA_RETURN_IF_ERROR(r.CheckMap(n, "spec.topology", {"preferSameRack", "preferSameNVLinkDomain"}));
  if (n["preferSameRack"]) {
    EXA_ASSIGN_OR_RETURN(out.prefer_same_rack,
                         r.Bool(n["preferSameRack"], "spec.topology.preferSameRack"));
  }
  if (n["preferSameNVLinkDomain"]) {
    EXA_ASSIGN_OR_RETURN(
        out.prefer_same_nvlink_domain,
        r.Bool(n["preferSameNVLinkDomain"], "spec.topology.preferSameNVLinkDomain"));
  }
  return absl::OkStatus();
}

absl::Status ParseHealthCheck(const Reader& r, const YAML::Node& n, HealthCheckSpec& out) {
  EXA_RETURN_IF_ERROR(r.CheckMap(n, "spec.healthCheck",
                                 {"processInterval", "modelInterval", "performanceInterval"}));
  struct Field {
    const char* key;
    absl::Duration* out;
  };
  for (Field f : {Field{"processInterval", &out.process_interval},
                  Field{"modelInterval", &out.model_interval},
                  Field{"performanceInterval", &out.performance_interval}}) {
    if (!n[f.key]) continue;
    std::string path = StrCat("spec.healthCheck.", f.key);
    EXA_ASSIGN_OR_RETURN(*f.out, r.Duration(n[f.key], path));
    if (*f.out < absl::Seconds(1)) {
      return r.Error(n[f.key], path,
                     StrCat("\"", n[f.key].Scalar(),
                            "\": must be at least 1s (probes too often "
                            "disturb serving, docs/architecture.md#health-checks)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseScheduling(const Reader& r, const YAML::Node& n, SchedulingSpec& out) {
  EXA_RETURN_IF_ERROR(r.CheckMap(n, "spec.scheduling", {"batchSize", "warmupReplicas"}));
  if (n["batchSize"]) {
    EXA_ASSIGN_OR_RETURN(out.batch_size,
                         r.Int(n["batchSize"], "spec.scheduling.batchSize", 1, kMaxReplicas));
  }
  if (n["warmupReplicas"]) {
    EXA_ASSIGN_OR_RETURN(
        out.warmup_replicas,
        r.Int(n["warmupReplicas"], "spec.scheduling.warmupReplicas", 0, kMaxReplicas));
  }
  return absl::OkStatus();
}

absl::Status ParseLabels(const Reader& r, const YAML::Node& n,
                         std::map<std::string, std::string>& out) {
  if (!n.IsMap()) return r.Error(n, "spec.labels", "must be a mapping of names to values");
  for (const auto& kv : n) {
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
    std::string path = StrCat("spec.labels.", key);
    if (!ValidLabelPart(key)) {
      return r.Error(kv.first, path,
                     "name must be 1-63 characters of letters, digits, '-', '_', '.', '/'");
    }
    if (key.starts_with(cluster::kReservedLabelPrefix)) {
      return r.Error(kv.first, path,
                     StrCat("names under ", cluster::kReservedLabelPrefix,
                            " are reserved for labels ExaServe sets itself"));
    }
    EXA_ASSIGN_OR_RETURN(std::string value, r.String(kv.second, path));
    if (!ValidLabelPart(value)) {
      return r.Error(kv.second, path,
                     StrCat("\"", value,
                            "\": expected 1-63 characters of letters, digits, '-', '_', '.', '/'"));
    }
    if (!out.emplace(key, value).second) return r.Error(kv.first, path, "appears twice");
    if (out.size() > kMaxLabels) {
      return r.Error(n, "spec.labels", StrCat("has more than ", kMaxLabels, " entries"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseProbe(const Reader& r, const YAML::Node& n, ProbeSpec& out) {
  EXA_RETURN_IF_ERROR(r.CheckMap(n, "spec.probe", {"prompt", "expect"}));
  if (n["prompt"]) {
    EXA_ASSIGN_OR_RETURN(out.prompt, r.String(n["prompt"], "spec.probe.prompt"));
    if (out.prompt.empty() || out.prompt.size() > 4096 || !ValidText(out.prompt)) {
      return r.Error(n["prompt"], "spec.probe.prompt",
                     "must be 1-4096 bytes of UTF-8 text without control characters");
    }
  }
  if (n["expect"]) {
    EXA_ASSIGN_OR_RETURN(out.expect, r.String(n["expect"], "spec.probe.expect"));
    if (out.expect.size() > 4096 || !ValidText(out.expect)) {
      return r.Error(n["expect"], "spec.probe.expect",
                     "must be at most 4096 bytes of UTF-8 text without control characters");
    }
  }
  return absl::OkStatus();
}

// "10%" or "0.1" (a fraction) → 0.1.
absl::Status ParseRollout(const Reader& r, const YAML::Node& n, RolloutSpec& out) {
  EXA_RETURN_IF_ERROR(r.CheckMap(
      n, "spec.rollout",
      {"stages", "observe", "regressionThreshold", "metrics", "keepRollbackTarget", "minSamples"}));
  if (n["stages"]) {
    const YAML::Node& st = n["stages"];
    if (!st.IsSequence() || st.size() == 0 || st.size() > 20) {
      return r.Error(st, "spec.rollout.stages",
                     "must be a list of 1-20 stages, each a replica count (12) or a "
                     "percentage (10%)");
    }
    for (size_t i = 0; i < st.size(); ++i) {
      const std::string path = StrCat("spec.rollout.stages[", i, "]");
      if (!st[i].IsScalar()) return r.Error(st[i], path, "must be a count or a percentage");
      RolloutStage stage;
      if (!st[i].Scalar().empty() && st[i].Scalar().back() == '%') {
        EXA_ASSIGN_OR_RETURN(double f, ParseFraction(r, st[i], path));
        if (f <= 0 || f > 1) {
          return r.Error(st[i], path, StrCat("\"", st[i].Scalar(), "\": must be in (0%, 100%]"));
        }
        stage.percent = f * 100;
      } else {
        EXA_ASSIGN_OR_RETURN(stage.replicas, r.Int(st[i], path, 1, kMaxReplicas));
      }
      out.stages.push_back(stage);
    }
  }
  if (n["observe"]) {
    EXA_ASSIGN_OR_RETURN(out.observe, r.Duration(n["observe"], "spec.rollout.observe"));
    if (out.observe < absl::Seconds(1)) {
      return r.Error(n["observe"], "spec.rollout.observe", "must be at least 1s");
    }
  }
  if (n["regressionThreshold"]) {
    EXA_ASSIGN_OR_RETURN(
        out.regression_threshold,
        ParseFraction(r, n["regressionThreshold"], "spec.rollout.regressionThreshold"));
    if (out.regression_threshold <= 0 || out.regression_threshold > 10) {
      return r.Error(n["regressionThreshold"], "spec.rollout.regressionThreshold",
                     StrCat("\"", n["regressionThreshold"].Scalar(),
                            "\": must be above 0% and at most 1000%"));
    }
  }
  if (n["metrics"]) {
    const YAML::Node& m = n["metrics"];
    if (!m.IsSequence() || m.size() == 0) {
      return r.Error(m, "spec.rollout.metrics", "must be a non-empty list");
    }
    out.metrics.clear();
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string path = StrCat("spec.rollout.metrics[", i, "]");
      EXA_ASSIGN_OR_RETURN(std::string name, r.String(m[i], path));
      if (std::find(std::begin(kRolloutMetrics), std::end(kRolloutMetrics), name) ==
          std::end(kRolloutMetrics)) {
        return r.Error(m[i], path,
                       StrCat("\"", name, "\": expected p99Latency, errorRate, memory or ttft"));
      }
      if (std::find(out.metrics.begin(), out.metrics.end(), name) != out.metrics.end()) {
        return r.Error(m[i], path, StrCat("\"", name, "\" appears twice"));
      }
      out.metrics.push_back(name);
    }
  }
  if (n["keepRollbackTarget"]) {
    EXA_ASSIGN_OR_RETURN(
        out.keep_rollback_target,
        r.Int(n["keepRollbackTarget"], "spec.rollout.keepRollbackTarget", 0, kMaxReplicas));
  }
  if (n["minSamples"]) {
    EXA_ASSIGN_OR_RETURN(out.min_samples,
                         r.Int(n["minSamples"], "spec.rollout.minSamples", 1, 1'000'000));
  }
  return absl::OkStatus();
}

absl::Status ParseSpecBody(const Reader& r, const YAML::Node& n, InferenceReplicaSpec& s) {
  EXA_RETURN_IF_ERROR(
      r.CheckMap(n, "spec",
                 {"model", "version", "backend", "replicas", "resources", "topology", "healthCheck",
                  "scheduling", "labels", "probe", "deadGrace", "maxLifetime", "context",
                  "concurrency", "rollout", "maxUnavailable", "autoscaling"}));
  if (!n["model"]) return r.Error(n, "spec.model", "is required");
  EXA_ASSIGN_OR_RETURN(s.model, r.String(n["model"], "spec.model"));
  if (!ValidModelName(s.model)) {
    return r.Error(n["model"], "spec.model",
                   StrCat("\"", s.model,
                          "\": expected 1-128 characters of letters, digits and - _ . / @ : +"));
  }
  if (n["version"]) {
    EXA_ASSIGN_OR_RETURN(s.version, r.String(n["version"], "spec.version"));
    // A version names a weights version (a directory in every cache): the weights rule, and
    // a label value besides (replicas carry it as their version label).
    if (absl::Status v = cluster::ValidateModelVersion("version", s.version);
        !v.ok() || !ValidLabelPart(s.version)) {
      return r.Error(n["version"], "spec.version",
                     v.ok() ? StrCat("\"", s.version, "\": expected at most 63 characters")
                            : ToStd(v.message()));
    }
  }
  if (n["backend"]) {
    EXA_ASSIGN_OR_RETURN(s.backend, r.String(n["backend"], "spec.backend"));
    if (s.backend != "cuda" && s.backend != "cpu" && s.backend != "sim") {
      return r.Error(n["backend"], "spec.backend",
                     StrCat("\"", s.backend, "\": expected one of cuda, cpu, sim"));
    }
  }
  if (!n["replicas"]) return r.Error(n, "spec.replicas", "is required");
  EXA_ASSIGN_OR_RETURN(s.replicas, r.Int(n["replicas"], "spec.replicas", 0, kMaxReplicas));
  if (n["resources"]) EXA_RETURN_IF_ERROR(ParseResources(r, n["resources"], s.resources));
  if (n["topology"]) EXA_RETURN_IF_ERROR(ParseTopology(r, n["topology"], s.topology));
  if (n["healthCheck"]) EXA_RETURN_IF_ERROR(ParseHealthCheck(r, n["healthCheck"], s.health_check));
  if (n["scheduling"]) EXA_RETURN_IF_ERROR(ParseScheduling(r, n["scheduling"], s.scheduling));
  if (n["labels"]) EXA_RETURN_IF_ERROR(ParseLabels(r, n["labels"], s.labels));
  if (n["probe"]) EXA_RETURN_IF_ERROR(ParseProbe(r, n["probe"], s.probe));
  if (n["deadGrace"]) {
    EXA_ASSIGN_OR_RETURN(s.dead_grace, r.Duration(n["deadGrace"], "spec.deadGrace"));
  }
  if (n["maxLifetime"]) {
    EXA_ASSIGN_OR_RETURN(s.max_lifetime, r.Duration(n["maxLifetime"], "spec.maxLifetime"));
  }
  if (n["context"]) {
    EXA_ASSIGN_OR_RETURN(s.context, r.Int(n["context"], "spec.context", 1, kMaxContextTokens));
  }
  if (n["concurrency"]) {
    EXA_ASSIGN_OR_RETURN(s.concurrency,
                         r.Int(n["concurrency"], "spec.concurrency", 1, kMaxConcurrency));
  }
  if (n["rollout"]) EXA_RETURN_IF_ERROR(ParseRollout(r, n["rollout"], s.rollout));
  if (n["maxUnavailable"]) {
    EXA_ASSIGN_OR_RETURN(s.max_unavailable,
                         r.Int(n["maxUnavailable"], "spec.maxUnavailable", 1, kMaxReplicas));
  }
  if (n["autoscaling"]) {
    EXA_RETURN_IF_ERROR(spec_internal::ParseAutoscaling(r, n["autoscaling"], s.autoscaling));
  }
  return absl::OkStatus();
}

// metadata.resourceVersion: a Raft index, written as a number or (as kubectl does) a string.
absl::StatusOr<uint64_t> ResourceVersionField(const Reader& r, const YAML::Node& n) {
  std::optional<uint64_t> v = n.IsScalar() ? ParseResourceVersion(n.Scalar()) : std::nullopt;
  if (!v) {
    return r.Error(n, "metadata.resourceVersion",
                   StrCat("\"", n.IsScalar() ? n.Scalar() : "?",
                          "\": expected a non-negative integer (the version `get` shows)"));
  }
  return *v;
}

absl::StatusOr<InferenceReplicaSpec> ParseDocument(const Reader& r, const YAML::Node& doc,
                                                   std::optional<uint64_t>* resource_version) {
  if (!doc.IsMap()) return r.Error(doc, "the document", "must be a mapping");
  EXA_RETURN_IF_ERROR(r.CheckMap(doc, "", {"apiVersion", "kind", "metadata", "spec"}));
  InferenceReplicaSpec s;
  for (const char* key : {"apiVersion", "kind", "metadata", "spec"}) {
    if (!doc[key]) return r.Error(doc, key, "is required");
  }
  EXA_ASSIGN_OR_RETURN(std::string api, r.String(doc["apiVersion"], "apiVersion"));
  if (api != kApiVersion) {
    return r.Error(doc["apiVersion"], "apiVersion",
                   StrCat("\"", api, "\": expected \"", kApiVersion, "\""));
  }
  EXA_ASSIGN_OR_RETURN(std::string kind, r.String(doc["kind"], "kind"));
  if (kind != kKindInferenceReplica) {
    return r.Error(doc["kind"], "kind",
                   StrCat("\"", kind, "\": expected \"", kKindInferenceReplica, "\""));
  }
  const YAML::Node& md = doc["metadata"];
  EXA_RETURN_IF_ERROR(r.CheckMap(md, "metadata", {"name", "resourceVersion"}));
  if (md["resourceVersion"]) {
    EXA_ASSIGN_OR_RETURN(*resource_version, ResourceVersionField(r, md["resourceVersion"]));
  }
  if (!md["name"]) return r.Error(md, "metadata.name", "is required");
  EXA_ASSIGN_OR_RETURN(s.name, r.String(md["name"], "metadata.name"));
  if (!ValidName(s.name)) {
    return r.Error(md["name"], "metadata.name", StrCat("\"", s.name, "\": ", kNameRule));
  }
  EXA_RETURN_IF_ERROR(ParseSpecBody(r, doc["spec"], s));
  if (absl::Status v = ValidateSpec(s); !v.ok()) {
    return absl::InvalidArgumentError(StrCat(r.Where(doc["spec"]), ": ", ToStd(v.message())));
  }
  return s;
}

std::string Quote(std::string_view s) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << std::string(s);
  return e.c_str();
}

}  // namespace

namespace spec_internal {

absl::StatusOr<double> ParseFraction(const Reader& r, const YAML::Node& n, std::string_view path) {
  if (!n.IsScalar()) return r.Error(n, path, "must be a percentage like 10%");
  std::string text = n.Scalar();
  bool percent = !text.empty() && text.back() == '%';
  if (percent) text.pop_back();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    return r.Error(n, path, StrCat("\"", n.Scalar(), "\": expected a percentage like 10%"));
  }
  return percent ? v / 100 : v;
}

}  // namespace spec_internal

absl::Status ValidateSpec(const InferenceReplicaSpec& s) {
  if (!ValidName(s.name)) {
    return absl::InvalidArgumentError(StrCat("metadata.name \"", s.name, "\": ", kNameRule));
  }
  if (s.replicas < 0 || s.replicas > kMaxReplicas) {
    return absl::InvalidArgumentError(
        StrCat("spec.replicas ", s.replicas, ": must be in [0, ", kMaxReplicas, "]"));
  }
  if (s.resources.gpu < 1 || s.resources.gpu > kMaxGpusPerReplica) {
    return absl::InvalidArgumentError(StrCat("spec.resources.gpu ", s.resources.gpu,
                                             ": must be in [1, ", kMaxGpusPerReplica, "]"));
  }
  if (s.dead_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("spec.deadGrace: must not be negative");
  }
  if (s.max_lifetime != absl::ZeroDuration() && s.max_lifetime < absl::Minutes(1)) {
    return absl::InvalidArgumentError(
        StrCat("spec.maxLifetime \"", DurationToString(s.max_lifetime),
               "\": must be 0 (unlimited) or at least 1m, or replicas restart in a loop"));
  }
  if (s.scheduling.batch_size < 1) {
    return absl::InvalidArgumentError(
        StrCat("spec.scheduling.batchSize ", s.scheduling.batch_size, ": must be at least 1"));
  }
  if (s.scheduling.warmup_replicas < 0) {
    return absl::InvalidArgumentError(
        StrCat("spec.scheduling.warmupReplicas ", s.scheduling.warmup_replicas, ": must be >= 0"));
  }
  if (s.context < 1 || s.concurrency < 1) {
    return absl::InvalidArgumentError("spec.context and spec.concurrency: must be at least 1");
  }
  if (!s.rollout.stages.empty()) {
    // Stages the operator wrote must grow strictly and end at 100 %.
    int previous = 0;
    for (size_t i = 0; i < s.rollout.stages.size(); ++i) {
      const RolloutStage& st = s.rollout.stages[i];
      int count =
          st.percent > 0 ? static_cast<int>(std::ceil(st.percent * s.replicas / 100)) : st.replicas;
      if (count <= previous) {
        return absl::InvalidArgumentError(
            StrCat("spec.rollout.stages[", i, "] ",
                   st.percent > 0 ? StrCat(st.percent, "%") : StrCat(st.replicas), " is ", count,
                   " of ", s.replicas, " replicas, not more than the stage before (", previous,
                   "): stages must increase"));
      }
      if (count > s.replicas && s.replicas > 0) {
        return absl::InvalidArgumentError(StrCat("spec.rollout.stages[", i, "] ", count,
                                                 ": more than spec.replicas (", s.replicas, ")"));
      }
      previous = count;
    }
    if (previous != s.replicas) {
      return absl::InvalidArgumentError(StrCat("spec.rollout.stages: the last stage is ", previous,
                                               " of ", s.replicas, " replicas; it must be 100%"));
    }
  }
  if (s.rollout.regression_threshold <= 0) {
    return absl::InvalidArgumentError("spec.rollout.regressionThreshold: must be above 0%");
  }
  if (s.rollout.min_samples < 1) {
    return absl::InvalidArgumentError("spec.rollout.minSamples: must be at least 1");
  }
  if (s.rollout.keep_rollback_target < 0 || s.max_unavailable < 0) {
    return absl::InvalidArgumentError(
        "spec.rollout.keepRollbackTarget and spec.maxUnavailable: must not be negative");
  }
  return ValidateAutoscaling(s);
}

std::vector<int> RolloutStageCounts(const InferenceReplicaSpec& spec) {
  const int n = spec.replicas;
  std::vector<RolloutStage> stages = spec.rollout.stages;
  if (stages.empty()) stages = {{12, 0}, {0, 10}, {0, 50}, {0, 100}};
  std::vector<int> out;
  for (const RolloutStage& st : stages) {
    int count = st.percent > 0 ? static_cast<int>(std::ceil(st.percent * n / 100)) : st.replicas;
    count = std::min(count, n);
    if (count > (out.empty() ? 0 : out.back())) out.push_back(count);
  }
  if (out.empty() || out.back() != n) out.push_back(n);
  return out;
}

int MaxUnavailable(const InferenceReplicaSpec& spec) {
  if (spec.max_unavailable > 0) return spec.max_unavailable;
  return std::max(1, spec.replicas / 100);
}

std::optional<uint64_t> ParseResourceVersion(std::string_view text) {
  constexpr size_t kMaxDigits = 20;  // 2^64 - 1 has 20
  if (text.empty() || text.size() > kMaxDigits) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return std::nullopt;
  }
  const std::string s(text);
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<uint64_t>(v);
}

absl::StatusOr<std::vector<InferenceReplicaSpec>> ParseSpecs(std::string_view yaml_text,
                                                             std::string_view source,
                                                             ResourceVersions* resource_versions) {
  constexpr size_t kMaxDocuments = 1000;
  std::vector<std::pair<int, std::string>> pieces = SplitDocuments(yaml_text);
  if (pieces.size() > kMaxDocuments) {
    return absl::InvalidArgumentError(
        StrCat(source, ": ", pieces.size(), " documents; at most ", kMaxDocuments));
  }
  std::vector<InferenceReplicaSpec> specs;
  std::set<std::string> names;
  for (const auto& [first_line, text] : pieces) {
    Reader r(source, first_line);
    YAML::Node doc;
    try {
      doc = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      std::string where = e.mark.is_null() ? std::string(source)
                                           : StrCat(source, ":", first_line + e.mark.line + 1, ":",
                                                    e.mark.column + 1);
      return absl::InvalidArgumentError(
          StrCat(where, ": invalid YAML: ", config::YamlParseError(e)));
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(StrCat(source, ": invalid YAML: ", e.what()));
    }
    if (doc.IsNull()) continue;
    try {
      std::optional<uint64_t> version;
      EXA_ASSIGN_OR_RETURN(InferenceReplicaSpec s, ParseDocument(r, doc, &version));
      if (!names.insert(s.name).second) {
        return absl::InvalidArgumentError(
            StrCat(r.Where(doc), ": metadata.name \"", s.name, "\" appears in two documents"));
      }
      if (version && resource_versions != nullptr) (*resource_versions)[s.name] = *version;
      specs.push_back(std::move(s));
    } catch (const YAML::Exception& e) {  // defensive: every access above is type-checked
      return absl::InvalidArgumentError(StrCat(source, ": ", e.what()));
    }
  }
  if (specs.empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": no InferenceReplica document"));
  }
  return specs;
}

absl::StatusOr<std::vector<InferenceReplicaSpec>> LoadSpecFile(const std::string& path) {
  EXA_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxSpecFileBytes));
  return ParseSpecs(text, path);
}

// "10%" when that reads back as exactly `f`, else the fraction itself ("0.07").
std::string FractionText(double f) {
  std::string pct = StrCat(f * 100);
  if (std::strtod(pct.c_str(), nullptr) / 100 == f) return StrCat(pct, "%");
  return StrCat(f);
}

std::string SpecToYaml(const InferenceReplicaSpec& s, std::optional<uint64_t> resource_version) {
  std::string out = StrCat("apiVersion: ", kApiVersion, "\nkind: ", kKindInferenceReplica,
                           "\nmetadata:\n  name: ", s.name, "\n");
  if (resource_version) StrAppend(&out, "  resourceVersion: ", *resource_version, "\n");
  StrAppend(&out, "spec:\n");
  StrAppend(&out, "  model: ", Quote(s.model), "\n  version: ", Quote(s.version),
            "\n  backend: ", s.backend, "\n  replicas: ", s.replicas, "\n");
  StrAppend(&out, "  resources:\n    gpu: ", s.resources.gpu, "\n");
  if (s.resources.memory_bytes > 0) {
    StrAppend(&out, "    memory: ", BytesToString(s.resources.memory_bytes), "\n");
  }
  StrAppend(&out, "  topology:\n    preferSameRack: ", s.topology.prefer_same_rack,
            "\n    preferSameNVLinkDomain: ", s.topology.prefer_same_nvlink_domain, "\n");
  StrAppend(
      &out,
      "  healthCheck:\n    processInterval: ", DurationToString(s.health_check.process_interval),
      "\n    modelInterval: ", DurationToString(s.health_check.model_interval),
      "\n    performanceInterval: ", DurationToString(s.health_check.performance_interval), "\n");
  StrAppend(&out, "  scheduling:\n    batchSize: ", s.scheduling.batch_size,
            "\n    warmupReplicas: ", s.scheduling.warmup_replicas, "\n");
  if (!s.labels.empty()) {
    StrAppend(&out, "  labels:\n");
    for (const auto& [k, v] : s.labels) StrAppend(&out, "    ", Quote(k), ": ", Quote(v), "\n");
  }
  StrAppend(&out, "  probe:\n    prompt: ", Quote(s.probe.prompt),
            "\n    expect: ", Quote(s.probe.expect), "\n");
  StrAppend(&out, "  deadGrace: ", DurationToString(s.dead_grace),
            "\n  maxLifetime: ", DurationToString(s.max_lifetime), "\n  context: ", s.context,
            "\n  concurrency: ", s.concurrency, "\n");
  StrAppend(&out, "  rollout:\n");
  if (!s.rollout.stages.empty()) {
    std::string stages;
    for (const RolloutStage& st : s.rollout.stages) {
      StrAppend(&stages, stages.empty() ? "" : ", ",
                st.percent > 0 ? StrCat(st.percent, "%") : StrCat(st.replicas));
    }
    StrAppend(&out, "    stages: [", stages, "]\n");
  }
  std::string metrics;
  for (const std::string& m : s.rollout.metrics)
    StrAppend(&metrics, metrics.empty() ? "" : ", ", m);
  StrAppend(&out, "    observe: ", DurationToString(s.rollout.observe),
            "\n    regressionThreshold: ", FractionText(s.rollout.regression_threshold),
            "\n    metrics: [", metrics,
            "]\n    keepRollbackTarget: ", s.rollout.keep_rollback_target,
            "\n    minSamples: ", s.rollout.min_samples, "\n");
  if (s.max_unavailable > 0) StrAppend(&out, "  maxUnavailable: ", s.max_unavailable, "\n");
  StrAppend(&out, AutoscalingToYaml(s.autoscaling));
  return out;
}

int WarmupWave(const InferenceReplicaSpec& spec) {
  return std::min(spec.replicas, spec.scheduling.warmup_replicas);
}

}  // namespace exa::scheduler
