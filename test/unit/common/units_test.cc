// Quantities and durations parse the way operators write them, and bad ones say what is allowed.
#include "common/units.h"
#include "common/host_port.h"

#include <catch2/catch.hpp>

namespace exa {
namespace {

TEST_CASE("ParseBytes accepts binary and decimal suffixes", "[units]") {
  CHECK(*ParseBytes("53Gi") == 53ULL * 1024 * 1024 * 1024);
  CHECK(*ParseBytes("500Mi") == 500ULL * 1024 * 1024);
  CHECK(*ParseBytes("1.5G") == 1500000000ULL);
  CHECK(*ParseBytes("4096") == 4096ULL);
  CHECK(*ParseBytes("64MiB") == 64ULL << 20);
  CHECK(*ParseBytes(" 2k ") == 2000ULL);
  CHECK(*ParseBytes("0.5Ki") == 512ULL);
  CHECK(*ParseBytes("15Ei") == 15ULL << 60);
}

TEST_CASE("ParseBytes rejects bad quantities with the value and the allowed forms", "[units]") {
  auto bad = ParseBytes("53Q");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("\"53Q\"") != std::string::npos);
  CHECK(std::string(bad.status().message()).find("unknown suffix \"Q\"") != std::string::npos);
  CHECK(std::string(bad.status().message()).find("53Gi") != std::string::npos);
  CHECK_FALSE(ParseBytes("").ok());
  CHECK_FALSE(ParseBytes("-1Gi").ok());
  CHECK_FALSE(ParseBytes("Gi").ok());
  CHECK_FALSE(ParseBytes("1.2.3G").ok());
  CHECK_FALSE(ParseBytes("0.3").ok());   // not a whole number of bytes
  CHECK_FALSE(ParseBytes("17Ei").ok());  // overflows 64 bits
}

TEST_CASE("ParseDuration accepts units and combinations", "[units]") {
  CHECK(*ParseDuration("30s") == absl::Seconds(30));
  CHECK(*ParseDuration("5m") == absl::Minutes(5));
  CHECK(*ParseDuration("24h") == absl::Hours(24));
  CHECK(*ParseDuration("250ms") == absl::Milliseconds(250));
  CHECK(*ParseDuration("1h30m") == absl::Minutes(90));
  CHECK(*ParseDuration("1.5s") == absl::Milliseconds(1500));
  CHECK(*ParseDuration("2d") == absl::Hours(48));
  CHECK(*ParseDuration("0s") == absl::ZeroDuration());
  CHECK(*ParseDuration("0") == absl::ZeroDuration());  // zero needs no unit
}

TEST_CASE("ParseDuration rejects bad durations", "[units]") {
  auto bad = ParseDuration("30");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("missing unit") != std::string::npos);
  auto unit = ParseDuration("5y");
  REQUIRE_FALSE(unit.ok());
  CHECK(std::string(unit.status().message()).find("unknown unit \"y\"") != std::string::npos);
  CHECK_FALSE(ParseDuration("").ok());
  CHECK_FALSE(ParseDuration("-1s").ok());
  CHECK_FALSE(ParseDuration("s").ok());
  CHECK_FALSE(ParseDuration("1000000d").ok());
  // The 100-year bound holds for the sum, not only each term.
  CHECK(ParseDuration("36500d").ok());
  auto sum = ParseDuration("36500d36500d");
  REQUIRE_FALSE(sum.ok());
  CHECK(std::string(sum.status().message()).find("longer than 100 years") != std::string::npos);
}

TEST_CASE("HostPortError accepts host:port and [v6]:port, and names what is wrong", "[units]") {
  for (const char* ok : {"10.0.0.1:7070", "node-3.rack-a:7946", "[::1]:7070", "h:1", "h:65535"}) {
    INFO(ok);
    CHECK(HostPortError(ok).empty());
  }
  CHECK(HostPortError("127.0.0.1") == "\"127.0.0.1\": expected host:port");
  CHECK(HostPortError("a:0") == "\"a:0\": port must be 1-65535");
  CHECK(HostPortError("h:70000") == "\"h:70000\": port must be 1-65535");
  CHECK(HostPortError("a:7946:1").find("brackets") != std::string::npos);
  CHECK(HostPortError("::1:7946").find("brackets") != std::string::npos);
  CHECK(HostPortError("a b:1").find("spaces") != std::string::npos);
  CHECK_FALSE(HostPortError("").empty());
  CHECK_FALSE(HostPortError("[::1:7070").empty());
}

TEST_CASE("Formatting round-trips through parsing", "[units]") {
  CHECK(BytesToString(53ULL << 30) == "53Gi");
  CHECK(BytesToString(1000) == "1000");
  CHECK(BytesToString(1536ULL << 20) == "1536Mi");
  CHECK(BytesToString(1500000000ULL) == "1.40Gi");
  CHECK(DurationToString(absl::Minutes(90)) == "1h30m");
  CHECK(DurationToString(absl::Milliseconds(250)) == "250ms");
  CHECK(DurationToString(absl::ZeroDuration()) == "0s");
  for (const char* d : {"30s", "5m", "24h", "1h30m5s", "15ms"}) {
    CHECK(DurationToString(*ParseDuration(d)) == d);
  }
  for (uint64_t b : {1ULL, 1024ULL, 53ULL << 30, 12345678ULL << 10}) {
    CHECK(*ParseBytes(BytesToString(b)) == b);
  }
}

}  // namespace
}  // namespace exa
