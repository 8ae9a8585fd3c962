// Structured logging on spdlog (docs/architecture.md#monitoring-and-alerts: logs as structured
// JSON).
//
//   EXA_LOG_INFO("membership", "member dead", {{"node", id}, {"incarnation", 7}});
//
// JSON format writes one object per line: {"ts", "level", "module", "msg", ...fields}. Text
// format writes `2026-11-29T16:56:22.123Z I membership] member dead node=ab12 incarnation=7`.
//
// Thread safety: every function may be called from any thread after InitLogging().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/status.h"

namespace exa {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class LogFormat { kJson, kText };

absl::Status ParseLogLevel(std::string_view text, LogLevel* out);
absl::Status ParseLogFormat(std::string_view text, LogFormat* out);

// Sends logs to stderr in `format`, dropping messages below `level`. Safe to call again.
void InitLogging(LogFormat format, LogLevel level);
bool LogEnabled(LogLevel level);

struct LogField {
  LogField(std::string_view k, std::string_view v) : key(k), value(std::string(v)) {}
  LogField(std::string_view k, const std::string& v) : key(k), value(v) {}
  LogField(std::string_view k, const char* v) : key(k), value(std::string(v)) {}
  LogField(std::string_view k, bool v) : key(k), value(v) {}
  LogField(std::string_view k, double v) : key(k), value(v) {}
  template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
  LogField(std::string_view k, Int v) : key(k), value(static_cast<int64_t>(v)) {}

  std::string_view key;
  std::variant<std::string, int64_t, double, bool> value;
};

void Log(LogLevel level, std::string_view module, std::string_view msg,
         std::initializer_list<LogField> fields = {});

// Formats one record; exposed for tests.
std::string FormatLogRecord(LogFormat format, LogLevel level, std::string_view module,
                            std::string_view msg, std::initializer_list<LogField> fields,
                            int64_t unix_micros);

}  // namespace exa

#define EXA_LOG_AT_(level, module, ...)                                   \
  do {                                                                    \
    if (::exa::LogEnabled(level)) ::exa::Log(level, module, __VA_ARGS__); \
  } while (false)
#define EXA_LOG_DEBUG(module, ...) EXA_LOG_AT_(::exa::LogLevel::kDebug, module, __VA_ARGS__)
#define EXA_LOG_INFO(module, ...) EXA_LOG_AT_(::exa::LogLevel::kInfo, module, __VA_ARGS__)
#define EXA_LOG_WARN(module, ...) EXA_LOG_AT_(::exa::LogLevel::kWarn, module, __VA_ARGS__)
#define EXA_LOG_ERROR(module, ...) EXA_LOG_AT_(::exa::LogLevel::kError, module, __VA_ARGS__)
