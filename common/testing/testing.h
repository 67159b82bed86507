// What every test shares: where to write, waiting on an event instead of
// sleeping, and the Python interpreter the tests run fixtures with.
//
// WaitFor synchronises a test on a condition it can observe; its timeout only
// bounds how long a failing test hangs, so it is generous and never part of
// what is asserted. A core whose behaviour depends on time passing (lease
// expiry) takes a Clock (common/clock.h); its test hands in a FakeClock and
// moves time instead of sleeping through it.
#ifndef KERNELRL_COMMON_TESTING_TESTING_H_
#define KERNELRL_COMMON_TESTING_TESTING_H_

#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace kernelrl::testing {

// $TEST_TMPDIR (Bazel gives each test its own), or /tmp when run by hand.
std::string TempDir();
// A fresh, empty directory TempDir()/<prefix>XXXXXX; aborts when it cannot be made.
std::string NewTempDir(const std::string& prefix);

// The interpreter for fixture scripts: $KERNELRL_PYTHON, else python3.
std::string Python();
// A Python that imports torch ($KERNELRL_PYTHON first, then python3 on PATH and
// the usual install places), or "" (the test then skips and says why).
std::string FindTorchPython();

// A Clock that moves only when told: Advance, or SleepFor (a sleeper's time
// passes at once). Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override;
  void SleepFor(absl::Duration d) override { Advance(d); }
  void Advance(absl::Duration d);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

// Polls `done` every `poll` until it returns true (returns true) or `timeout`
// has passed on `clock` (returns false).
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout, Clock* clock = RealClock(),
             absl::Duration poll = absl::Milliseconds(5));

// A Prometheus text exposition as "name{labels}" -> value, comments skipped.
std::map<std::string, double> ParseScrape(const std::string& text);

}  // namespace kernelrl::testing

#endif  // KERNELRL_COMMON_TESTING_TESTING_H_
