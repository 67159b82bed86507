// Which isolation steps CUDA runs under on this host, decided once per zygote
// start on the CUDA backend. Some hosts (VMs, old drivers) cannot initialise
// CUDA under every step; the host decides what degrades, never the candidate,
// and every drop is logged.
//
// The order: the full set first (as the host allows it), used where CUDA works
// under it; else each group of the plan alone (a step with the steps it
// needs), so the log names the exact step CUDA cannot run under; then every
// tolerated step together; if that fails (or nothing was tolerated), the
// plan's other fallbacks in order, each "the full set minus these", and the
// first under which CUDA works is used for every job; if none works, no step.
// The zygote only runs each probe it is asked for (a forked child under that
// isolation initialises CUDA and runs a kernel) and answers ok/error; the
// choice is made here (tests/isolation_calibration_test.cc).
#ifndef KERNELRL_SANDBOX_ISOLATION_CALIBRATION_H_
#define KERNELRL_SANDBOX_ISOLATION_CALIBRATION_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kernelrl::sandbox {

using IsolationMap = std::map<std::string, bool>;  // step name -> on

struct IsolationPlan {
  std::vector<std::string> steps;                // every step a candidate can get (the full set)
  std::vector<std::vector<std::string>> groups;  // probed alone, in order
  std::vector<std::vector<std::string>> drops;   // fallbacks: the full set minus each, in order
};

// Today's plan, in one place.
const IsolationPlan& DefaultIsolationPlan();

// `iso` with each step off that the host cannot do (`caps`: the zygote's
// hello, by capability name; what each step needs is sandbox/contain/roles.h's
// table). A capability the hello does not name is absent, and a step the
// table does not know is off.
IsolationMap AllowedOnHost(const IsolationMap& iso, const std::map<std::string, bool>& caps);

struct ProbeAnswer {
  bool ok = false;
  std::string error;  // why not, or the probe's detail
};

struct CalibrationStep {
  std::string kind;                // "full", "alone", "together" or "dropped"
  std::vector<std::string> steps;  // the plan's steps, the group, the tolerated set, or the dropped steps
  ProbeAnswer answer;
};

struct IsolationCalibration {
  IsolationMap isolation;             // every step of the plan, on or off
  std::vector<std::string> dropped;   // the steps off, sorted
  std::vector<CalibrationStep> log;   // every probe asked, in order
};

using IsolationProbe = std::function<ProbeAnswer(const IsolationMap& isolation)>;

// Asks `probe` in the order above (each isolation already AllowedOnHost) and
// returns the chosen isolation.
IsolationCalibration CalibrateIsolation(const IsolationPlan& plan, const std::map<std::string, bool>& caps,
                                        const IsolationProbe& probe);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_ISOLATION_CALIBRATION_H_
