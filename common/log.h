// Minimal leveled logging to stderr: `KLOG(INFO) << "listening on " << port;`
// One line per message, prefixed with level, time and source location, so
// logs from four services interleave readably. (Debian's Abseil predates absl/log.)
#ifndef KERNELRL_COMMON_LOG_H_
#define KERNELRL_COMMON_LOG_H_

#include <sstream>
#include <string>

namespace kernelrl {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Set from ServerConfig.log_level.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// Parses "debug", "info", "warning", "error"; false if unknown.
bool ParseLogLevel(const std::string& name, LogLevel* level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // Writes the line (one write(2), so lines do not tear).
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace kernelrl

#define KLOG_LEVEL_DEBUG ::kernelrl::LogLevel::kDebug
#define KLOG_LEVEL_INFO ::kernelrl::LogLevel::kInfo
#define KLOG_LEVEL_WARNING ::kernelrl::LogLevel::kWarning
#define KLOG_LEVEL_ERROR ::kernelrl::LogLevel::kError

#define KLOG(level)                                            \
  if (KLOG_LEVEL_##level < ::kernelrl::MinLogLevel()) {        \
  } else                                                       \
    ::kernelrl::LogMessage(KLOG_LEVEL_##level, __FILE__, __LINE__).stream()

#endif  // KERNELRL_COMMON_LOG_H_
