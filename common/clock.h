// Clock readings used across services: a monotonic millisecond counter for
// stage timings, an RFC 3339 UTC timestamp for manifests and protos, and the
// Clock seam a core takes when a test must move its time (lease expiry) instead
// of sleeping through it (common/testing:FakeClock).
#ifndef KERNELRL_COMMON_CLOCK_H_
#define KERNELRL_COMMON_CLOCK_H_

#include <time.h>

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kernelrl {

// Milliseconds on CLOCK_MONOTONIC: differences only, immune to clock steps.
inline double MonotonicMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// "2026-11-22T05:46:04Z".
std::string NowRfc3339();

// Wall-clock time and sleeping, behind an interface. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  virtual void SleepFor(absl::Duration d) = 0;
};

// absl::Now and absl::SleepFor; never destroyed.
Clock* RealClock();

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_CLOCK_H_
