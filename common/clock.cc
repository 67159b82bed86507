#include "common/clock.h"

#include <ctime>

namespace kernelrl {

std::string NowRfc3339() {
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
};

}  // namespace

Clock* RealClock() {
  static SystemClock* const clock = new SystemClock;
  return clock;
}

}  // namespace kernelrl
