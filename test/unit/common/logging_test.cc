// Log records are valid single-line JSON (or readable text) carrying structured fields.
#include "common/logging.h"

#include <catch2/catch.hpp>

namespace exa {
namespace {

TEST_CASE("JSON records carry ts, level, module, msg and typed fields", "[logging]") {
  std::string line = FormatLogRecord(
      LogFormat::kJson, LogLevel::kWarn, "membership", "member \"x\" dead\n",
      {{"node", "ab12"}, {"incarnation", 7}, {"lost", true}}, 1'700'000'000'123'000);
  CHECK(line ==
        "{\"ts\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warn\",\"module\":\"membership\","
        "\"msg\":\"member \\\"x\\\" dead\\n\",\"node\":\"ab12\",\"incarnation\":7,\"lost\":true}");
}

TEST_CASE("Text records are one readable line", "[logging]") {
  std::string line = FormatLogRecord(LogFormat::kText, LogLevel::kInfo, "daemon", "listening",
                                     {{"port", 8080}, {"addr", "0.0.0.0"}}, 0);
  CHECK(line == "1970-01-01T00:00:00.000Z I daemon] listening port=8080 addr=0.0.0.0");
}

TEST_CASE("Levels and formats parse with clear errors", "[logging]") {
  LogLevel level;
  CHECK(ParseLogLevel("debug", &level).ok());
  CHECK(level == LogLevel::kDebug);
  absl::Status bad = ParseLogLevel("loud", &level);
  CHECK(bad.message() == "\"loud\": expected one of trace, debug, info, warn, error, off");
  LogFormat format;
  CHECK(ParseLogFormat("json", &format).ok());
  CHECK_FALSE(ParseLogFormat("xml", &format).ok());
}

}  // namespace
}  // namespace exa
