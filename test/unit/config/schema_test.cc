// Config sources apply in precedence order and every error names the source, key and value.
#include "config/schema.h"

#include <fstream>
#include <limits>

#include <catch2/catch.hpp>

#include "common/strings.h"
#include "support/temp_dir.h"

namespace exa::config {
namespace {

struct TestOptions {
  std::string rack = "default";
  uint16_t http_port = 8080;
  Bytes max_body{1 << 20};
  absl::Duration drain_timeout = absl::Seconds(30);
  std::vector<std::string> roles{"auto"};
  bool tls = false;
  std::string format = "json";
};

void Register(Schema& s, TestOptions* o) {
  s.Add("node.rack", &o->rack, "rack name");
  s.Add("network.http_port", &o->http_port, "HTTP port");
  s.Add("http.max_body_bytes", &o->max_body, "largest request body");
  s.Add("lifecycle.drain_timeout", &o->drain_timeout, "how long to drain");
  s.Add<std::vector<std::string>>("node.roles", &o->roles, "roles",
                                  [](const std::vector<std::string>& v) -> std::string {
                                    for (const auto& r : v) {
                                      if (r != "auto" && r != "gateway") {
                                        return StrCat("\"", r, "\": expected auto or gateway");
                                      }
                                    }
                                    return "";
                                  });
  s.Add("network.tls", &o->tls, "TLS on");
  s.AddEnum("log.format", &o->format, {"json", "text"}, "log format");
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("Defaults stand when no source sets a key", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  REQUIRE(s.LoadYamlString("", "empty.yaml").ok());
  CHECK(o.http_port == 8080);
  CHECK(o.roles == std::vector<std::string>{"auto"});
}

TEST_CASE("Flags beat environment beats file beats defaults", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  REQUIRE(s.LoadYamlString("node:\n  rack: r-file\n  roles: [gateway]\nnetwork:\n"
                           "  http_port: 9000\nhttp:\n  max_body_bytes: 2Mi\n",
                           "f.yaml")
              .ok());
  // EXASERVE_TOKEN belongs to exaserve-cli: a daemon started from the same shell ignores it.
  const char* env[] = {"EXASERVE_NETWORK_HTTP_PORT=9100", "EXASERVE_NODE_RACK=r-env", "PATH=/bin",
                       "EXASERVE_TOKEN=secret", nullptr};
  REQUIRE(s.LoadEnvironment(env).ok());
  REQUIRE(s.Set("node.rack", "r-flag", "flag --rack").ok());
  CHECK(o.rack == "r-flag");            // flag
  CHECK(o.http_port == 9100);           // env over file
  CHECK(o.max_body.value == 2u << 20);  // file over default
  CHECK(o.roles == std::vector<std::string>{"gateway"});
  CHECK(o.drain_timeout == absl::Seconds(30));  // default
}

TEST_CASE("Unknown keys are refused with the nearest valid key", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  absl::Status st = s.LoadYamlString("http:\n  max_body_byte: 1Mi\n", "c.yaml");
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(st) ==
        "c.yaml:2:3: unknown key \"http.max_body_byte\"; did you mean \"http.max_body_bytes\"?");
  absl::Status far = s.LoadYamlString("zebra: 1\n", "c.yaml");
  CHECK(Message(far).find("valid sections: node, network, http, lifecycle, log") !=
        std::string::npos);
  const char* env[] = {"EXASERVE_NETWORK_HTTP_PROT=1", nullptr};
  absl::Status env_st = s.LoadEnvironment(env);
  CHECK(Message(env_st) ==
        "environment EXASERVE_NETWORK_HTTP_PROT: unknown key \"network.http_prot\"; did you "
        "mean \"network.http_port\"?");
}

TEST_CASE("Bad values name the location, key, value and what is allowed", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  CHECK(Message(s.LoadYamlString("network:\n  http_port: 70000\n", "c.yaml")) ==
        "c.yaml:2:14: network.http_port \"70000\": out of range [0, 65535]");
  CHECK(Message(s.LoadYamlString("http:\n  max_body_bytes: 53Q\n", "c.yaml"))
            .find("c.yaml:2:19: http.max_body_bytes \"53Q\": unknown suffix") == 0);
  CHECK(Message(s.Set("log.format", "xml", "flag --log-format")) ==
        "flag --log-format: log.format \"xml\": expected one of json, text");
  CHECK(Message(s.Set("node.roles", "gateway,bogus", "flag --role")) ==
        "flag --role: node.roles \"bogus\": expected auto or gateway");
  CHECK(Message(s.Set("network.tls", "maybe", "flag --tls")) ==
        "flag --tls: network.tls \"maybe\": expected true or false");
  CHECK(Message(s.LoadYamlString("lifecycle:\n  drain_timeout: [1, 2]\n", "c.yaml"))
            .find("expected a single value") != std::string::npos);
  // A failed set leaves the previous value in place.
  CHECK(o.http_port == 8080);
  CHECK(o.format == "json");
}

TEST_CASE("Invalid YAML reports file:line:column", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  std::string path = "/tmp/exa_config_test_bad.yaml";
  std::ofstream(path) << "node:\n  rack: [unclosed\n";
  absl::Status st = s.LoadYamlFile(path);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(st).rfind(path + ":", 0) == 0);
  CHECK(Message(st).find("invalid YAML") != std::string::npos);
  CHECK(s.LoadYamlFile("/nonexistent/exa.yaml").code() == absl::StatusCode::kNotFound);
  CHECK(Message(s.LoadYamlString("- a\n- b\n", "list.yaml")) ==
        "list.yaml:1:1: the document must be a mapping of keys to values");
  // yaml-cpp's own words for this are "bad file".
  const std::string deep = "a: " + std::string(10000, '[') + std::string(10000, ']');
  CHECK_THAT(
      Message(s.LoadYamlString(deep, "deep.yaml")),
      Catch::Matches("deep\\.yaml:1:[0-9]+: invalid YAML: nested more than [0-9]+ levels deep"));
}

TEST_CASE("ToYaml prints the effective config, which loads back to the same values", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  REQUIRE(s.Set("node.roles", "gateway", "test").ok());
  REQUIRE(s.Set("http.max_body_bytes", "3Mi", "test").ok());
  std::string yaml = s.ToYaml();
  CHECK(yaml.find("  # largest request body\n  max_body_bytes: 3Mi\n") != std::string::npos);
  TestOptions fresh;
  Schema s2;
  Register(s2, &fresh);
  REQUIRE(s2.LoadYamlString(yaml, "printed").ok());
  CHECK(fresh.roles == o.roles);
  CHECK(fresh.max_body == o.max_body);
  CHECK(fresh.drain_timeout == o.drain_timeout);
  CHECK(Schema::EnvName("http.max_body_bytes") == "EXASERVE_HTTP_MAX_BODY_BYTES");
}

// Found by the config fuzz target (test/fuzz/config): 16000 bytes printed as "15.62Ki", which
// the loader refuses as not a whole number of bytes.
TEST_CASE("A size that is no whole binary unit prints exactly and loads back", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  REQUIRE(s.Set("http.max_body_bytes", "1.5G", "test").ok());
  std::string yaml = s.ToYaml();
  CHECK(yaml.find("  max_body_bytes: 1500000000\n") != std::string::npos);
  TestOptions fresh;
  Schema s2;
  Register(s2, &fresh);
  REQUIRE(s2.LoadYamlString(yaml, "printed").ok());
  CHECK(fresh.max_body == o.max_body);
}

// Found by the config fuzz target: every negative value of a signed key was refused as out of
// range, so a validator's own message never showed.
TEST_CASE("Signed keys take negative values; their bounds still hold", "[config]") {
  int offset = 0;
  int64_t seed = 0;
  uint16_t port = 0;
  Schema s;
  s.Add<int>("tuning.offset", &offset, "an offset",
             [](const int& v) { return v >= -10 ? "" : StrCat(v, ": must be at least -10"); });
  s.Add("tuning.seed", &seed, "a seed");
  s.Add("tuning.port", &port, "a port");
  REQUIRE(s.LoadYamlString("tuning: {offset: -3, seed: -9223372036854775808}", "f.yaml").ok());
  CHECK(offset == -3);
  CHECK(seed == std::numeric_limits<int64_t>::min());
  CHECK(Message(s.Set("tuning.offset", "-11", "flag")) ==
        "flag: tuning.offset -11: must be at least -10");
  CHECK(Message(s.Set("tuning.offset", "-2147483649", "flag")).find("out of range") !=
        std::string::npos);
  CHECK(Message(s.Set("tuning.port", "-1", "flag")).find("out of range [0, 65535]") !=
        std::string::npos);
  CHECK(Message(s.Set("tuning.port", "65536", "flag")).find("out of range") != std::string::npos);
  CHECK(port == 0);
}

TEST_CASE("exaserve-cli's variables do not stop the daemon; a directory is no config file",
          "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  const char* env[] = {"EXASERVE_TOKEN=t",          "EXASERVE_TLS_CA=/ca.pem",
                       "EXASERVE_TLS_CERT=/c.pem",  "EXASERVE_TLS_KEY=/k.pem",
                       "EXASERVE_CACHE_DIR=/cache", "EXASERVE_RACK_CACHE=h:1",
                       "EXASERVE_NODE_RACK=r9",     nullptr};
  REQUIRE(s.LoadEnvironment(env).ok());
  CHECK(o.rack == "r9");
  absl::Status dir = s.LoadYamlFile("/tmp");
  CHECK(dir.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(dir) == "/tmp: is a directory, not a config file");
}

TEST_CASE("A key given twice, or a second document, is refused, not silently dropped", "[config]") {
  TestOptions o;
  Schema s;
  Register(s, &o);
  absl::Status twice = s.LoadYamlString("network:\n  http_port: 1\n  http_port: 2\n", "twice.yaml");
  CHECK(Message(twice) == "twice.yaml:3:3: network.http_port appears twice");
  testing::TempDir tmp;
  const std::string path = (tmp.path / "two.yaml").string();
  std::ofstream(path) << "node:\n  rack: a\n---\nnode:\n  rack: b\n";
  absl::Status two = s.LoadYamlFile(path);
  CHECK(Message(two).find("more than one YAML document; a config file holds one") !=
        std::string::npos);
}

TEST_CASE("Limits that would stop a node at 0 are refused", "[config]") {
  Bytes body{1 << 20}, head{16 << 10};
  absl::Duration timeout = absl::Seconds(30);
  Schema s;
  s.Add("http.max_body_bytes", &body, "body", Validator<Bytes>(PositiveBytes));
  s.Add("http.max_header_bytes", &head, "head", BytesBetween(1 << 10, 1 << 30));
  s.Add("http.read_timeout", &timeout, "read", Validator<absl::Duration>(PositiveDuration));
  CHECK(Message(s.Set("http.max_body_bytes", "0", "flag")).find("must be more than 0") !=
        std::string::npos);
  CHECK(Message(s.Set("http.max_header_bytes", "4Gi", "flag")).find("4Gi: expected 1Ki to 1Gi") !=
        std::string::npos);
  CHECK(Message(s.Set("http.read_timeout", "0s", "flag")).find("must be more than 0") !=
        std::string::npos);
  CHECK(s.Set("http.max_header_bytes", "32Ki", "flag").ok());
  CHECK(head.value == 32 << 10);
}

TEST_CASE("EditDistance", "[config]") {
  CHECK(EditDistance("kitten", "sitting") == 3);
  CHECK(EditDistance("", "abc") == 3);
  CHECK(EditDistance("same", "same") == 0);
}

}  // namespace
}  // namespace exa::config
