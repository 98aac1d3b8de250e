// Minimal leveled logging to stderr: one line per call, with a UTC timestamp,
// the level and the source file:line. Safe for concurrent use (one write(2)
// per line). Debian 12's Abseil has no absl/log yet.
//
//   YARD_LOG(INFO) << "worker " << id << " connected";
#ifndef TRAINYARD_COMMON_LOG_H_
#define TRAINYARD_COMMON_LOG_H_

#include <sstream>
#include <string_view>

namespace trainyard {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Default kInfo; YARD_LOG_LEVEL=debug
// in the environment lowers it.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace trainyard

#define YARD_LOG_LEVEL_DEBUG ::trainyard::LogLevel::kDebug
#define YARD_LOG_LEVEL_INFO ::trainyard::LogLevel::kInfo
#define YARD_LOG_LEVEL_WARNING ::trainyard::LogLevel::kWarning
#define YARD_LOG_LEVEL_ERROR ::trainyard::LogLevel::kError

#define YARD_LOG(level)                                          \
  if (YARD_LOG_LEVEL_##level < ::trainyard::MinLogLevel()) {     \
  } else                                                         \
    ::trainyard::LogMessage(YARD_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#endif  // TRAINYARD_COMMON_LOG_H_
