// Quantities and durations parse the way operators write them, and bad ones say what is allowed.
#include "common/units.h"

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
