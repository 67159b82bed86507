#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kernelrl {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

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

void SetMinLogLevel(LogLevel level) { g_min_level = static_cast<int>(level); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

bool ParseLogLevel(const std::string& name, LogLevel* level) {
  if (name == "debug") *level = LogLevel::kDebug;
  else if (name == "info" || name.empty()) *level = LogLevel::kInfo;
  else if (name == "warning") *level = LogLevel::kWarning;
  else if (name == "error") *level = LogLevel::kError;
  else return false;
  return true;
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << LevelName(level) << absl::FormatTime(" %Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone())
          << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  (void)level_;
}

}  // namespace kernelrl
