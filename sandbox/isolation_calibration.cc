#include "sandbox/isolation_calibration.h"

#include <algorithm>
#include <set>

#include "sandbox/contain/roles.h"

namespace kernelrl::sandbox {
namespace {

IsolationMap Only(const IsolationPlan& plan, const std::set<std::string>& on) {
  IsolationMap iso;
  for (const std::string& s : plan.steps) iso[s] = on.count(s) > 0;
  return iso;
}

}  // namespace

const IsolationPlan& DefaultIsolationPlan() {
  static const IsolationPlan kPlan = {
      {"user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns", "readonly_root", "mount_proc", "seccomp", "data_limit",
       "new_root", "identity"},
      // A step with the steps it needs.
      {{"user_ns"},
       {"pid_ns"},
       {"net_ns"},
       {"ipc_ns"},
       {"mount_ns"},
       {"mount_ns", "readonly_root"},
       {"pid_ns", "mount_ns", "mount_proc"},
       {"seccomp"},
       {"data_limit"},
       {"mount_ns", "new_root"},
       {"identity"}},
      // The least lost first; seccomp is never dropped.
      {{},
       {"new_root", "identity"},
       {"data_limit"},
       {"mount_proc"},
       {"user_ns"},
       {"user_ns", "mount_proc"},
       {"user_ns", "mount_proc", "data_limit"},
       {"readonly_root", "mount_proc", "mount_ns"},
       {"user_ns", "pid_ns", "mount_proc"},
       {"user_ns", "pid_ns", "mount_ns", "readonly_root", "mount_proc"},
       {"user_ns", "pid_ns", "mount_ns", "readonly_root", "mount_proc", "ipc_ns", "net_ns", "data_limit", "new_root",
        "identity"}}};
  return kPlan;
}

IsolationMap AllowedOnHost(const IsolationMap& iso, const std::map<std::string, bool>& caps) {
  const int bits = CapsFromNames(caps);
  IsolationMap out;
  for (const auto& [step, on] : iso) out[step] = on && StepAllowed(step, bits);
  return out;
}

IsolationCalibration CalibrateIsolation(const IsolationPlan& plan, const std::map<std::string, bool>& caps,
                                        const IsolationProbe& probe) {
  IsolationCalibration c;
  // Probes `iso` as the host allows it; true when CUDA works under it.
  auto ask = [&](const std::string& kind, const std::vector<std::string>& steps, const IsolationMap& iso) {
    c.isolation = AllowedOnHost(iso, caps);
    c.log.push_back({kind, steps, probe(c.isolation)});
    return c.log.back().answer.ok;
  };
  auto done = [&] {
    for (const auto& [step, on] : c.isolation) {
      if (!on) c.dropped.push_back(step);  // std::map: sorted
    }
    return c;
  };
  const std::set<std::string> all(plan.steps.begin(), plan.steps.end());
  // One probe where the host takes every step (each probe is a CUDA start, ~1 s);
  // the steps one by one only to find what fails.
  if (ask("full", plan.steps, Only(plan, all))) return done();
  std::set<std::string> tolerated;
  for (const std::vector<std::string>& group : plan.groups) {
    if (ask("alone", group, Only(plan, {group.begin(), group.end()}))) tolerated.insert(group.begin(), group.end());
  }
  if (!tolerated.empty() && tolerated != all &&
      ask("together", {tolerated.begin(), tolerated.end()}, Only(plan, tolerated))) {
    return done();
  }
  for (const std::vector<std::string>& drop : plan.drops) {
    if (drop.empty()) continue;  // the full set, probed first
    std::set<std::string> on = all;
    for (const std::string& d : drop) on.erase(d);
    if (ask("dropped", drop, Only(plan, on))) return done();
  }
  c.isolation = Only(plan, {});
  return done();
}

}  // namespace kernelrl::sandbox
