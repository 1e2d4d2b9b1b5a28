#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cctune {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    if (upper == LogLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", name, "': expected one of DEBUG, INFO, WARNING, ERROR"));
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "INFO";
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void Logf(LogLevel level, const char* format, ...) {
  if (!LogEnabled(level)) return;
  std::va_list args;
  va_start(args, format);
  std::string line(256, '\0');
  std::va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(line.data(), line.size(), format, copy);
  va_end(copy);
  if (n >= static_cast<int>(line.size())) {
    line.resize(n + 1);
    std::vsnprintf(line.data(), line.size(), format, args);
  }
  va_end(args);
  line.resize(n > 0 ? n : 0);
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

}  // namespace cctune
