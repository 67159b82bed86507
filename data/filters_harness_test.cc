// Each execution filter, end to end through the Python worker and the
// profiler's harness on the CPU backend: a task built to fail it is rejected
// by that filter (and no earlier one), and a task built to pass is kept.
#include <filesystem>
#include <memory>
#include <string>

#include "data/filters.h"
#include "data/python_worker.h"
#include "gtest/gtest.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"

namespace kernelrl {
namespace {

namespace fs = std::filesystem;

class FiltersHarnessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PythonWorker::Options o;
    o.harness_root = fs::current_path().string();  // Runfiles root: data/ and profiler_service/.
    o.threads = 1;
    worker_ = new PythonWorker(o);
  }
  static void TearDownTestSuite() {
    delete worker_;
    worker_ = nullptr;
  }
  static std::string Task(const std::string& name) {
    return (fs::current_path() / "data" / "testdata" / (name + ".py")).string();
  }
  // The filter that rejects the task's probe, or "" when it passes.
  static std::string ProbeVerdict(const std::string& name, const std::string& backend) {
    FilterConfig c;
    c.set_compile_backend(backend);
    c = WithFilterDefaults(c);
    ProbeOptions o;
    o.compile_backend = c.compile_backend();
    o.lock_path = (fs::path(::testing::TempDir()) / "lock").string();
    auto facts = RequestProbe(*worker_, Task(name), o, 120);
    EXPECT_TRUE(facts.ok()) << facts.status();
    if (!facts.ok()) return "request failed";
    const auto r = JudgeProbe(*facts, c);
    return r ? r->filter : "";
  }
  static PythonWorker* worker_;
};
PythonWorker* FiltersHarnessTest::worker_ = nullptr;

TEST_F(FiltersHarnessTest, EachProbeFilterRejectsTheTaskBuiltToFailIt) {
  for (const char* name : {"eager_fails", "stochastic", "compile_differs", "non_finite", "constant",
                           "indistinguishable", "near_zero", "near_mean"}) {
    std::string expected = name;
    if (expected == "eager_fails") expected = "eager";
    if (expected == "compile_differs") expected = "compile";
    EXPECT_EQ(ProbeVerdict(name, "aot_eager"), expected) << name;
  }
}

TEST_F(FiltersHarnessTest, AWellFormedTaskPassesEveryProbeFilter) {
  EXPECT_EQ(ProbeVerdict("pass", "aot_eager"), "");
  EXPECT_EQ(ProbeVerdict("runtime_ok", "aot_eager"), "");
}

TEST_F(FiltersHarnessTest, RuntimeWindowThroughTheProfilerProtocol) {
  FilterConfig c;
  c.set_min_eager_ms(1.0);
  c.set_max_eager_ms(2000.0);  // A loaded 2-core CI machine: only the lower edge is under test here.
  c = WithFilterDefaults(c);
  const ProfilerConfig profiler = WithProfilerDefaults(ProfilerConfig());
  auto run = [&](const std::string& name) -> std::string {
    TimingOptions o;
    o.lock_path = (fs::path(::testing::TempDir()) / "lock").string();
    auto bm = RequestTiming(*worker_, name, Task(name), o, 120);
    EXPECT_TRUE(bm.ok()) << bm.status();
    if (!bm.ok()) return "request failed";
    EXPECT_GE(bm->eager().samples_size(), 3) << name;
    const Baseline b = BuildBaseline(*bm, profiler);
    const auto r = JudgeRuntime(b, c);
    return r ? r->filter + ": " + r->detail : "";
  };
  EXPECT_EQ(run("too_fast").rfind("runtime: eager", 0), 0u);
  EXPECT_EQ(run("runtime_ok"), "");
  // The upper edge: the same task is too slow for a 0.5 us ceiling.
  c.set_max_eager_ms(5e-4);
  EXPECT_EQ(run("runtime_ok").rfind("runtime: eager", 0), 0u);
}

// The default backend (inductor) on the two tasks that decide the compile filter.
TEST_F(FiltersHarnessTest, InductorCompilesThePassingTaskAndCatchesTheDifferingOne) {
  EXPECT_EQ(ProbeVerdict("pass", "inductor"), "");
  EXPECT_EQ(ProbeVerdict("compile_differs", "inductor"), "compile");
}

}  // namespace
}  // namespace kernelrl
