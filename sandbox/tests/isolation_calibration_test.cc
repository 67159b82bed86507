// The CUDA isolation choice against simulated hosts: a fake probe says CUDA
// works unless the isolation holds a step the simulated host breaks CUDA
// under. Which steps break is drawn at random per run; the expected choice is
// computed independently from the documented order.
#include "sandbox/isolation_calibration.h"

#include <algorithm>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "sandbox/contain/roles.h"

namespace kernelrl::sandbox {
namespace {

std::set<std::string> On(const IsolationMap& iso) {
  std::set<std::string> on;
  for (const auto& [k, v] : iso) {
    if (v) on.insert(k);
  }
  return on;
}

// A host where CUDA fails under any isolation containing a step of `breaks`.
struct FakeHost {
  std::set<std::string> breaks;
  std::vector<IsolationMap> asked;
  IsolationProbe Probe() {
    return [this](const IsolationMap& iso) {
      asked.push_back(iso);
      for (const std::string& b : breaks) {
        if (iso.count(b) && iso.at(b)) return ProbeAnswer{false, "CUDA init failed under " + b};
      }
      return ProbeAnswer{true, ""};
    };
  }
};

// A host that reported every capability.
std::map<std::string, bool> AllCaps() {
  std::map<std::string, bool> caps;
  for (int i = 0; CapabilityName(i) != nullptr; ++i) caps[CapabilityName(i)] = true;
  return caps;
}
const std::map<std::string, bool> kAllCaps = AllCaps();

TEST(IsolationCalibrationTest, DefaultPlanIsConsistent) {
  const IsolationPlan& p = DefaultIsolationPlan();
  const std::set<std::string> all(p.steps.begin(), p.steps.end());
  EXPECT_EQ(all.size(), p.steps.size());
  std::set<std::string> grouped;
  for (const auto& g : p.groups) {
    for (const std::string& s : g) {
      EXPECT_TRUE(all.count(s)) << s;
      grouped.insert(s);
    }
  }
  EXPECT_EQ(grouped, all) << "every step is probed in some group";
  ASSERT_FALSE(p.drops.empty());
  EXPECT_TRUE(p.drops.front().empty()) << "the full set is the first fallback";
  for (const auto& d : p.drops) {
    for (const std::string& s : d) EXPECT_TRUE(all.count(s)) << s;
    EXPECT_EQ(std::count(d.begin(), d.end(), "seccomp"), 0) << "seccomp is never dropped";
  }
}

TEST(IsolationCalibrationTest, HealthyHostKeepsEveryStep) {
  FakeHost host;
  const IsolationCalibration c = CalibrateIsolation(DefaultIsolationPlan(), kAllCaps, host.Probe());
  const IsolationPlan& p = DefaultIsolationPlan();
  EXPECT_EQ(On(c.isolation), std::set<std::string>(p.steps.begin(), p.steps.end()));
  EXPECT_TRUE(c.dropped.empty());
  // One probe: the full set works, so no step is probed alone.
  ASSERT_EQ(c.log.size(), 1u);
  EXPECT_EQ(c.log[0].kind, "full");
  EXPECT_EQ(c.log[0].steps, p.steps);
  EXPECT_EQ(On(host.asked[0]), std::set<std::string>(p.steps.begin(), p.steps.end()));
}

TEST(IsolationCalibrationTest, RandomBrokenStepsAreDroppedTogether) {
  const IsolationPlan& p = DefaultIsolationPlan();
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    FakeHost host;
    // 1..3 broken steps, never all of them.
    std::vector<std::string> steps = p.steps;
    std::shuffle(steps.begin(), steps.end(), rng);
    host.breaks.insert(steps.begin(), steps.begin() + std::uniform_int_distribution<int>(1, 3)(rng));
    const IsolationCalibration c = CalibrateIsolation(p, kAllCaps, host.Probe());
    // Expected: the union of the groups that hold no broken step, probed together.
    std::set<std::string> tolerated;
    for (const auto& g : p.groups) {
      if (std::none_of(g.begin(), g.end(), [&](const std::string& s) { return host.breaks.count(s) > 0; })) {
        tolerated.insert(g.begin(), g.end());
      }
    }
    ASSERT_FALSE(tolerated.empty());
    EXPECT_EQ(On(c.isolation), tolerated);
    // The full set fails, every group alone, then the tolerated ones together.
    ASSERT_EQ(c.log.size(), 1 + p.groups.size() + 1);
    EXPECT_EQ(c.log.front().kind, "full");
    EXPECT_FALSE(c.log.front().answer.ok);
    for (size_t i = 0; i < p.groups.size(); ++i) {
      EXPECT_EQ(c.log[1 + i].kind, "alone");
      EXPECT_EQ(On(host.asked[1 + i]), std::set<std::string>(p.groups[i].begin(), p.groups[i].end()));
    }
    EXPECT_EQ(c.log.back().kind, "together");
    EXPECT_TRUE(c.log.back().answer.ok);
    for (const std::string& b : host.breaks) {
      EXPECT_TRUE(std::count(c.dropped.begin(), c.dropped.end(), b)) << b;
    }
    EXPECT_TRUE(std::is_sorted(c.dropped.begin(), c.dropped.end()));
    for (const CalibrationStep& s : c.log) {
      if (!s.answer.ok) {
        EXPECT_FALSE(s.answer.error.empty());
      }
    }
  }
}

// Steps fine alone but not together: the full set fails; with every group
// tolerated alone there is no "together" probe; with one group failing alone
// the tolerated set is probed together first. Either way the other fallbacks
// are tried in order and the first that works is kept.
TEST(IsolationCalibrationTest, FailingTogetherFallsBackInOrder) {
  const IsolationPlan& p = DefaultIsolationPlan();
  std::mt19937 rng(std::random_device{}());
  for (const bool identity_breaks : {false, true}) {
    // Breaks when user_ns and one drawn partner are on together (and, in the
    // second case, whenever identity is on).
    const std::vector<std::string> partners = {"mount_proc", "data_limit", "pid_ns"};
    const std::string partner = partners[std::uniform_int_distribution<int>(0, 2)(rng)];
    auto works = [&](const std::set<std::string>& on) {
      return !(on.count("user_ns") && on.count(partner)) && !(identity_breaks && on.count("identity"));
    };
    std::vector<IsolationMap> asked;
    const IsolationCalibration c = CalibrateIsolation(p, kAllCaps, [&](const IsolationMap& iso) {
      asked.push_back(iso);
      return ProbeAnswer{works(On(iso)), "pair"};
    });
    size_t first = 0;
    std::set<std::string> want;
    for (; first < p.drops.size(); ++first) {
      want = std::set<std::string>(p.steps.begin(), p.steps.end());
      for (const std::string& s : p.drops[first]) want.erase(s);
      if (works(want)) break;
    }
    ASSERT_LT(first, p.drops.size());
    ASSERT_GT(first, 0u) << "the full set breaks here";
    EXPECT_EQ(On(c.isolation), want) << partner;
    const size_t together = identity_breaks ? 1 : 0;
    // The full set, every group alone, maybe together, then fallbacks 1..first.
    EXPECT_EQ(c.log.size(), 1 + p.groups.size() + together + first) << partner;
    EXPECT_EQ(asked.size(), c.log.size());
    EXPECT_EQ(c.log.front().kind, "full");
    const CalibrationStep& after_groups = c.log[1 + p.groups.size()];
    if (identity_breaks) {
      EXPECT_EQ(after_groups.kind, "together");
      EXPECT_FALSE(after_groups.answer.ok);
      EXPECT_EQ(std::count(after_groups.steps.begin(), after_groups.steps.end(), "identity"), 0);
    } else {
      EXPECT_EQ(after_groups.kind, "dropped");
      EXPECT_EQ(after_groups.steps, p.drops[1]);
    }
  }
}

TEST(IsolationCalibrationTest, NothingWorksMeansNoStep) {
  const IsolationCalibration c =
      CalibrateIsolation(DefaultIsolationPlan(), kAllCaps, [](const IsolationMap&) { return ProbeAnswer{false, "x"}; });
  EXPECT_TRUE(On(c.isolation).empty());
  EXPECT_EQ(c.dropped.size(), DefaultIsolationPlan().steps.size());
  // The full set, every group alone, no "together" (none tolerated), every
  // other fallback: the full set is probed once.
  EXPECT_EQ(c.log.size(), DefaultIsolationPlan().groups.size() + DefaultIsolationPlan().drops.size());
  EXPECT_EQ(std::count_if(c.log.begin(), c.log.end(), [](const CalibrationStep& s) { return s.steps.empty(); }), 0);
}

TEST(IsolationCalibrationTest, HostCapsGateEveryProbeAndTheChoice) {
  std::map<std::string, bool> caps = kAllCaps;
  caps["ro_remount"] = caps["pivot_root"] = false;
  FakeHost host;
  const IsolationCalibration c = CalibrateIsolation(DefaultIsolationPlan(), caps, host.Probe());
  for (const IsolationMap& iso : host.asked) {
    EXPECT_FALSE(iso.at("readonly_root"));
    EXPECT_FALSE(iso.at("new_root"));
  }
  EXPECT_EQ(c.dropped, (std::vector<std::string>{"new_root", "readonly_root"}));
  EXPECT_TRUE(c.isolation.at("mount_proc"));
}

TEST(IsolationCalibrationTest, AllowedOnHostMapsStepsToCaps) {
  const IsolationMap iso = {{"readonly_root", true}, {"mount_proc", true}, {"new_root", true}, {"net_ns", true},
                            {"seccomp", false}};
  std::map<std::string, bool> caps = kAllCaps;
  caps["ro_remount"] = caps["net_ns"] = false;
  IsolationMap got = AllowedOnHost(iso, caps);
  EXPECT_EQ(got, (IsolationMap{{"readonly_root", false}, {"mount_proc", true}, {"new_root", true}, {"net_ns", false},
                               {"seccomp", false}}));
  caps = kAllCaps;
  caps["proc_mount"] = caps["pivot_root"] = false;
  caps["readonly_root"] = false;  // not a capability name: changes nothing
  got = AllowedOnHost(iso, caps);
  EXPECT_TRUE(got.at("readonly_root")) << "readonly_root is gated by ro_remount, not its own name";
  EXPECT_FALSE(got.at("mount_proc"));
  EXPECT_FALSE(got.at("new_root"));
}

// A hello that does not name a capability (an older zygote, a probe that
// did not run) leaves the steps that need it off, and a step nobody knows is
// off too: nothing is assumed.
TEST(IsolationCalibrationTest, ACapabilityNotReportedIsAbsent) {
  const IsolationMap iso = {{"new_root", true}, {"net_ns", true}, {"data_limit", true}, {"no_such_step", true},
                            {"identity", true}};
  std::map<std::string, bool> caps = kAllCaps;
  caps.erase("pivot_root");
  caps.erase("net_ns");
  caps.erase("host_identity");
  EXPECT_EQ(AllowedOnHost(iso, caps), (IsolationMap{{"new_root", false}, {"net_ns", false}, {"data_limit", true},
                                                    {"no_such_step", false}, {"identity", true}}))
      << "identity still has user_ns";
  EXPECT_EQ(AllowedOnHost(iso, {}), (IsolationMap{{"new_root", false}, {"net_ns", false}, {"data_limit", true},
                                                  {"no_such_step", false}, {"identity", false}}));
}

}  // namespace
}  // namespace kernelrl::sandbox
