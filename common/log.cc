#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainyard {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("YARD_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  std::string v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warning") return LogLevel::kWarning;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level(static_cast<int>(LevelFromEnv()));
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

void SetMinLogLevel(LogLevel level) { MinLevel() = static_cast<int>(level); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevel().load()); }

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << LevelName(level_) << " "
          << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                              absl::UTCTimeZone())
          << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string line = stream_.str();
  // One write(2) so concurrent lines do not interleave.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace trainyard
