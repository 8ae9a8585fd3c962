#include "common/logging.h"

#include <atomic>
#include <cctype>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/strings.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace exa {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};

std::shared_ptr<spdlog::logger>& Logger() {
  static auto* logger = new std::shared_ptr<spdlog::logger>(
      std::make_shared<spdlog::logger>("exa", std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  return *logger;
}

constexpr std::string_view kLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          fmt::format_to(std::back_inserter(*out), "\\u{:04x}", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void AppendValue(std::string* out, const LogField& f, bool json) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (json || v.find_first_of(" \"=") != std::string::npos) {
            AppendJsonString(out, v);
          } else {
            out->append(v);
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          out->append(v ? "true" : "false");
        } else {
          StrAppend(out, v);
        }
      },
      f.value);
}

}  // namespace

absl::Status ParseLogLevel(std::string_view text, LogLevel* out) {
  for (size_t i = 0; i < std::size(kLevelNames); ++i) {
    if (text == kLevelNames[i]) {
      *out = static_cast<LogLevel>(i);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      StrCat("\"", text, "\": expected one of trace, debug, info, warn, error, off"));
}

absl::Status ParseLogFormat(std::string_view text, LogFormat* out) {
  if (text == "json") {
    *out = LogFormat::kJson;
  } else if (text == "text") {
    *out = LogFormat::kText;
  } else {
    return absl::InvalidArgumentError(StrCat("\"", text, "\": expected json or text"));
  }
  return absl::OkStatus();
}

void InitLogging(LogFormat format, LogLevel level) {
  g_format = format;
  g_level = level;
  Logger()->set_pattern("%v");
  Logger()->set_level(spdlog::level::trace);
  Logger()->flush_on(spdlog::level::trace);
}

bool LogEnabled(LogLevel level) { return level >= g_level.load(std::memory_order_relaxed); }

std::string FormatLogRecord(LogFormat format, LogLevel level, std::string_view module,
                            std::string_view msg, std::initializer_list<LogField> fields,
                            int64_t unix_micros) {
  std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMicros(unix_micros),
                                    absl::UTCTimeZone());
  std::string out;
  std::string_view level_name = kLevelNames[static_cast<int>(level)];
  if (format == LogFormat::kJson) {
    StrAppend(&out, "{\"ts\":\"", ts, "\",\"level\":\"", level_name, "\",\"module\":");
    AppendJsonString(&out, module);
    out.append(",\"msg\":");
    AppendJsonString(&out, msg);
    for (const LogField& f : fields) {
      out.push_back(',');
      AppendJsonString(&out, f.key);
      out.push_back(':');
      AppendValue(&out, f, /*json=*/true);
    }
    out.push_back('}');
  } else {
    char letter = static_cast<char>(std::toupper(level_name[0]));
    StrAppend(&out, ts, " ", std::string(1, letter), " ", module, "] ", msg);
    for (const LogField& f : fields) {
      StrAppend(&out, " ", f.key, "=");
      AppendValue(&out, f, /*json=*/false);
    }
  }
  return out;
}

void Log(LogLevel level, std::string_view module, std::string_view msg,
         std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) return;
  std::string line =
      FormatLogRecord(g_format.load(), level, module, msg, fields, absl::ToUnixMicros(absl::Now()));
  Logger()->info(line);
}

}  // namespace exa
