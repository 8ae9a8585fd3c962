// InferenceReplica specs: docs/architecture.md#orchestration's example parses, defaults fill in,
// and bad input is refused with the file position, the field path, the value and what is allowed.
#include <catch2/catch.hpp>
#include <string>

#include "common/strings.h"
#include "scheduler/spec.h"

namespace exa::scheduler {
namespace {

constexpr const char* kMissionSpec = R"(apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: llama-13b-replica}
spec:
  model: llama-13b
  replicas: 3072
  resources: {gpu: 1, memory: 53Gi}
  topology: {preferSameRack: true, preferSameNVLinkDomain: true}
  healthCheck: {processInterval: 10s, modelInterval: 30s, performanceInterval: 5m}
  scheduling: {batchSize: 512, warmupReplicas: 256}
)";

std::string Error(const std::string& yaml) {
  auto specs = ParseSpecs(yaml, "spec.yaml");
  REQUIRE_FALSE(specs.ok());
  return std::string(ToStd(specs.status().message()));
}

std::string WithSpecLine(const std::string& line) {
  return std::string(kMissionSpec) + "  " + line + "\n";
}

TEST_CASE("docs/architecture.md example spec parses with every field") {
  auto specs = ParseSpecs(kMissionSpec, "spec.yaml");
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == 1);
  const InferenceReplicaSpec& s = specs->front();
  CHECK(s.name == "llama-13b-replica");
  CHECK(s.model == "llama-13b");
  CHECK(s.replicas == 3072);
  CHECK(s.resources.gpu == 1);
  CHECK(s.resources.memory_bytes == 53ull << 30);
  CHECK(s.topology.prefer_same_rack);
  CHECK(s.topology.prefer_same_nvlink_domain);
  CHECK(s.health_check.process_interval == absl::Seconds(10));
  CHECK(s.health_check.model_interval == absl::Seconds(30));
  CHECK(s.health_check.performance_interval == absl::Minutes(5));
  CHECK(s.scheduling.batch_size == 512);
  CHECK(s.scheduling.warmup_replicas == 256);
  // Defaults of the fields the example leaves out.
  CHECK(s.dead_grace == absl::Seconds(30));
  CHECK(s.context == 4096);
  CHECK(s.concurrency == 4);
  CHECK(s.probe.prompt == "1+1=");
  CHECK(s.probe.expect == "2");
  CHECK(s.backend == "cuda");
}

TEST_CASE("The issue's extra fields parse") {
  std::string yaml = std::string(kMissionSpec) + R"(  version: v2
  backend: sim
  labels: {tier: gold, team: search}
  probe: {prompt: "2+2=", expect: "4"}
  deadGrace: 45s
  maxLifetime: 24h
  context: 2048
  concurrency: 8
)";
  auto specs = ParseSpecs(yaml, "spec.yaml");
  REQUIRE(specs.ok());
  const InferenceReplicaSpec& s = specs->front();
  CHECK(s.version == "v2");
  CHECK(s.backend == "sim");
  CHECK(s.labels.at("tier") == "gold");
  CHECK(s.probe.expect == "4");
  CHECK(s.dead_grace == absl::Seconds(45));
  CHECK(s.max_lifetime == absl::Hours(24));
  CHECK(s.context == 2048);
  CHECK(s.concurrency == 8);
}

TEST_CASE("Canonical YAML parses back to the same spec") {
  auto specs = ParseSpecs(WithSpecLine("labels: {a: b}"), "spec.yaml");
  REQUIRE(specs.ok());
  auto again = ParseSpecs(SpecToYaml(specs->front()), "canonical");
  REQUIRE(again.ok());
  CHECK(again->front() == specs->front());
}

TEST_CASE("A bad quantity names the position, the field, the value and the allowed form") {
  std::string yaml = kMissionSpec;
  yaml.replace(yaml.find("53Gi"), 4, "53Q");
  std::string e = Error(yaml);
  CHECK(e.find("spec.yaml:7:") == 0);
  CHECK(e.find("spec.resources.memory") != std::string::npos);
  CHECK(e.find("\"53Q\"") != std::string::npos);
  CHECK(e.find("53Gi") != std::string::npos);
}

TEST_CASE("Unknown fields are refused with the nearest valid one") {
  std::string e = Error(WithSpecLine("replica: 3"));
  CHECK(e.find("unknown field \"spec.replica\"") != std::string::npos);
  CHECK(e.find("did you mean \"replicas\"") != std::string::npos);
  e = Error(std::string(kMissionSpec) + "status: {}\n");
  CHECK(e.find("unknown field \"status\"") != std::string::npos);
  std::string yaml = kMissionSpec;
  yaml.replace(yaml.find("preferSameRack"), 14, "preferSameRak");
  e = Error(yaml);
  CHECK(e.find("spec.topology.preferSameRak") != std::string::npos);
  CHECK(e.find("did you mean \"preferSameRack\"") != std::string::npos);
}

TEST_CASE("Out-of-range and malformed values are refused") {
  std::string yaml = kMissionSpec;
  yaml.replace(yaml.find("3072"), 4, "-3");
  std::string e = Error(yaml);
  CHECK(e.find("spec.replicas -3: must be in [0, ") != std::string::npos);
  yaml = kMissionSpec;
  yaml.replace(yaml.find("gpu: 1"), 6, "gpu: x");
  CHECK(Error(yaml).find("spec.resources.gpu \"x\": expected an integer") != std::string::npos);
  yaml = kMissionSpec;
  yaml.replace(yaml.find("preferSameRack: true"), 20, "preferSameRack: maybe");
  CHECK(Error(yaml).find("\"maybe\": expected true or false") != std::string::npos);
  CHECK(Error(WithSpecLine("deadGrace: soon")).find("spec.deadGrace \"soon\"") !=
        std::string::npos);
  CHECK(Error(WithSpecLine("backend: tpu")).find("expected one of cuda, cpu, sim") !=
        std::string::npos);
  CHECK(Error(WithSpecLine("maxLifetime: 5s")).find("spec.maxLifetime") != std::string::npos);
  yaml = kMissionSpec;
  yaml.replace(yaml.find("processInterval: 10s"), 20, "processInterval: 10ms");
  CHECK(Error(yaml).find("must be at least 1s") != std::string::npos);
  // A version names a weights directory: no paths, no names of the layout's own files.
  CHECK(Error(WithSpecLine("version: \"../../etc\"")).find("spec.version") != std::string::npos);
  CHECK(Error(WithSpecLine("version: v1.pinned")).find("must not end in \".pinned\"") !=
        std::string::npos);
  // Labels under exaserve.io/ are the system's.
  CHECK(Error(WithSpecLine("labels: {exaserve.io/deployment: x}")).find("reserved") !=
        std::string::npos);
  // A duration is bounded as a whole, so what is stored reads back.
  CHECK(Error(WithSpecLine("deadGrace: 36500d36500d")).find("longer than 100 years") !=
        std::string::npos);
}

TEST_CASE("A document after an end marker (...) is parsed, not dropped") {
  const std::string two = std::string(kMissionSpec) + "...\n" + kMissionSpec;
  auto specs = ParseSpecs(two, "two.yaml");
  REQUIRE_FALSE(specs.ok());  // both are read: the same name twice
  CHECK(std::string(specs.status().message()).find("appears in two documents") !=
        std::string::npos);
}

TEST_CASE("Header fields are checked") {
  std::string yaml = kMissionSpec;
  yaml.replace(yaml.find("exaserve.io/v1"), 14, "exaserve.io/v2");
  CHECK(Error(yaml).find("apiVersion \"exaserve.io/v2\": expected \"exaserve.io/v1\"") !=
        std::string::npos);
  yaml = kMissionSpec;
  yaml.replace(yaml.find("llama-13b-replica"), 17, "Llama_13B");
  CHECK(Error(yaml).find("metadata.name \"Llama_13B\"") != std::string::npos);
  yaml = kMissionSpec;
  yaml.replace(yaml.find("  model: llama-13b\n"), 19, "");
  CHECK(Error(yaml).find("spec.model is required") != std::string::npos);
  CHECK(Error("a: [").find("invalid YAML") != std::string::npos);
  CHECK(Error("").find("no InferenceReplica document") != std::string::npos);
}

TEST_CASE("Inputs that tripped yaml-cpp or the round trip are refused, quickly") {
  // yaml-cpp 0.7's LoadAll allocates without end on a stray ',' after a document.
  CHECK_FALSE(ParseSpecs(",1, 2, {a: *x}]", "spec.yaml").ok());
  CHECK_FALSE(ParseSpecs(std::string(kMissionSpec) + "---\n{a: b},\n", "spec.yaml").ok());
  std::string yaml = kMissionSpec;
  yaml.replace(yaml.find("model: llama-13b"), 16, "model: \"m\\xe9x\"");
  CHECK(Error(yaml).find("spec.model") != std::string::npos);
  CHECK(Error(WithSpecLine("probe: {prompt: \"a\\u0001\"}")).find("spec.probe.prompt") !=
        std::string::npos);
}

TEST_CASE("Errors in a later document name its line in the file") {
  std::string yaml = std::string(kMissionSpec) + "---\n" + kMissionSpec;
  yaml.replace(yaml.rfind("53Gi"), 4, "53Q");
  CHECK(Error(yaml).find("spec.yaml:18:") == 0);
}

TEST_CASE("Several documents parse; a bad one refuses the whole file") {
  std::string two = std::string(kMissionSpec) + "---\n" + kMissionSpec;
  CHECK(Error(two).find("appears in two documents") != std::string::npos);
  std::string other = kMissionSpec;
  other.replace(other.find("llama-13b-replica"), 17, "other");
  auto specs = ParseSpecs(std::string(kMissionSpec) + "---\n" + other, "spec.yaml");
  REQUIRE(specs.ok());
  CHECK(specs->size() == 2);
  std::string bad = other;
  bad.replace(bad.find("53Gi"), 4, "lots");
  CHECK_FALSE(ParseSpecs(std::string(kMissionSpec) + "---\n" + bad, "spec.yaml").ok());
}

TEST_CASE("metadata.resourceVersion is read beside the spec, never into it") {
  std::string yaml = kMissionSpec;
  yaml.replace(yaml.find("llama-13b-replica}"), 18, "llama-13b-replica, resourceVersion: 42}");
  ResourceVersions versions;
  auto specs = ParseSpecs(yaml, "spec.yaml", &versions);
  REQUIRE(specs.ok());
  CHECK(versions == ResourceVersions{{"llama-13b-replica", 42}});
  // The stored spec neither carries nor compares it: equal to the spec without it.
  auto plain = ParseSpecs(kMissionSpec, "spec.yaml");
  REQUIRE(plain.ok());
  CHECK(specs->front() == plain->front());
  CHECK(SpecToYaml(specs->front()).find("resourceVersion") == std::string::npos);
  // What `get -o yaml` prints reads back with its version (quoted, as kubectl writes it, too).
  std::string printed = SpecToYaml(specs->front(), 7);
  CHECK(printed.find("metadata:\n  name: llama-13b-replica\n  resourceVersion: 7\n") !=
        std::string::npos);
  versions.clear();
  REQUIRE(ParseSpecs(printed, "get.yaml", &versions).ok());
  CHECK(versions.at("llama-13b-replica") == 7);
  yaml = kMissionSpec;
  yaml.replace(yaml.find("llama-13b-replica}"), 18, "llama-13b-replica, resourceVersion: \"9\"}");
  versions.clear();
  REQUIRE(ParseSpecs(yaml, "spec.yaml", &versions).ok());
  CHECK(versions.at("llama-13b-replica") == 9);

  for (std::string bad : {"abc", "-1", "1.5", "99999999999999999999", "[1]"}) {
    yaml = kMissionSpec;
    yaml.replace(yaml.find("llama-13b-replica}"), 18,
                 StrCat("llama-13b-replica, resourceVersion: ", bad, "}"));
    INFO(bad);
    CHECK(Error(yaml).find("metadata.resourceVersion") != std::string::npos);
  }
  CHECK(ParseResourceVersion("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(ParseResourceVersion("18446744073709551616"));
  CHECK_FALSE(ParseResourceVersion(""));
  CHECK_FALSE(ParseResourceVersion("+3"));
}

}  // namespace
}  // namespace exa::scheduler
