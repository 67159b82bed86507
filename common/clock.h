// Clock readings used across services: a monotonic millisecond counter for
// stage timings and an RFC 3339 UTC timestamp for manifests and protos.
#ifndef KERNELRL_COMMON_CLOCK_H_
#define KERNELRL_COMMON_CLOCK_H_

#include <time.h>

#include <string>

namespace kernelrl {

// Milliseconds on CLOCK_MONOTONIC: differences only, immune to clock steps.
inline double MonotonicMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// "2026-11-22T05:46:04Z".
std::string NowRfc3339();

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_CLOCK_H_
