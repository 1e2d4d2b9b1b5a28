// The recipes' own messages on stderr, by level (torchtune's `log_level`): DEBUG < INFO <
// WARNING < ERROR; messages below the process's level are dropped. INFO is the default.
//   LogInfo("Saved checkpoint %s", dir.c_str());
// Metric loggers (training/metric_logger.h) are not messages and ignore the level.
#ifndef CCTUNE_CORE_LOG_H_
#define CCTUNE_CORE_LOG_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cctune {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "DEBUG", "INFO", "WARNING" or "ERROR", any case; InvalidArgument naming the value and the
// allowed ones otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
const char* LogLevelName(LogLevel level);

// The process-wide level (thread-safe).
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool LogEnabled(LogLevel level);

// printf-style; appends the newline. Writes to stderr when `level` is enabled.
void Logf(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));
#define CCTUNE_LOG_FN(Name, Level)                                                  \
  template <typename... Args>                                                       \
  void Name(const char* format, Args... args) {                                     \
    Logf(Level, format, args...);                                                   \
  }
CCTUNE_LOG_FN(LogDebug, LogLevel::kDebug)
CCTUNE_LOG_FN(LogInfo, LogLevel::kInfo)
CCTUNE_LOG_FN(LogWarning, LogLevel::kWarning)
#undef CCTUNE_LOG_FN

}  // namespace cctune

#endif  // CCTUNE_CORE_LOG_H_
