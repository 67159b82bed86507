// The CUDA start-up calibration end to end through a real zygote: a
// VerifyStage configured for the CUDA backend asks the zygote for every
// isolation probe, the CUPTI recorder probe and the copy probe, and its
// hello reports the choice. On a machine without a GPU every probe's child fails to initialise
// CUDA, so each answer must be a real probe's failure (not a protocol error),
// the worker must have walked the whole plan (every group alone, every
// fallback) and dropped every step. With a GPU, seccomp must stay on.
#include <sys/stat.h>

#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "gtest/gtest.h"
#include "sandbox/contain/contain.h"
#include "sandbox/isolation_calibration.h"
#include "sandbox/tests/e2e_util.h"
#include "sandbox/verify_stage.h"

namespace kernelrl::sandbox {
namespace {

bool HasGpu() {
  struct stat st;
  return stat("/dev/nvidia0", &st) == 0;
}

TEST(CalibrationStartTest, ZygoteAnswersEveryProbeTheWorkerAsksFor) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch";
  SandboxConfig config = testing::CpuConfig(python);
  config.set_backend("cuda");
  config.set_kprof_lib(testing::Cwd() + "/profiler_service/libkprof.so");
  config = WithDefaults(config);
  ASSERT_FALSE(config.profiler_root().empty()) << "the profiler harness is in the runfiles";
  mkdir(config.work_root().c_str(), 0700);
  const int caps = ProbeHostCapabilities();
  auto stage = std::make_unique<VerifyStage>(config, config.harness_dir(), config.contain_lib(), caps);
  // Spawned (as a worker spawns all its zygotes at once): the zygote said hello
  // and has been asked for no probe yet; EnsureStarted asks for them.
  ASSERT_TRUE(stage->Spawn().ok());
  absl::StatusOr<std::string> log = ReadFileToString(config.work_root() + "/zygote.log");
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_FALSE(absl::StrContains(*log, "[calibrate]")) << *log;
  absl::StatusOr<v1::sandbox::HarnessHello> hello = stage->EnsureStarted();
  ASSERT_TRUE(hello.ok()) << hello.status();
  ASSERT_TRUE(hello->profiler_error().empty()) << hello->profiler_error();
  const IsolationPlan& plan = DefaultIsolationPlan();
  const std::set<std::string> dropped(hello->isolation_dropped_for_cuda().begin(),
                                      hello->isolation_dropped_for_cuda().end());
  ASSERT_GE(hello->calibration_size(), 3);
  EXPECT_TRUE(absl::StartsWith(hello->calibration(hello->calibration_size() - 2), "recorder=["))
      << "the recorder is probed after the isolation, under the chosen one";
  EXPECT_TRUE(absl::StartsWith(hello->calibration(hello->calibration_size() - 1), "copies=["))
      << "the copy probe comes last";
  for (const std::string& line : hello->calibration()) {
    EXPECT_FALSE(absl::StrContains(line, "unknown job kind")) << line;
    EXPECT_FALSE(absl::StrContains(line, "zygote: Traceback")) << line;
  }
  if (HasGpu()) {
    EXPECT_EQ(dropped.count("seccomp"), 0u) << "CUDA must run under seccomp";
    return;
  }
  // No GPU: every probe fails in its child, so the full set, every group
  // alone, no "together", every other fallback, and nothing left on.
  EXPECT_EQ(hello->calibration_size(), static_cast<int>(plan.groups.size() + plan.drops.size()) + 2);
  EXPECT_EQ(dropped, std::set<std::string>(plan.steps.begin(), plan.steps.end()));
  for (int i = 0; i < hello->calibration_size(); ++i) {
    EXPECT_TRUE(absl::StrContains(hello->calibration(i), "ok=0 ")) << hello->calibration(i);
  }
  EXPECT_TRUE(absl::StartsWith(hello->calibration(0), "full=[" + absl::StrJoin(plan.steps, ",") + "] ok=0 "))
      << hello->calibration(0);
  EXPECT_TRUE(absl::StartsWith(hello->calibration(1), "alone=[user_ns] ok=0 ")) << hello->calibration(1);
  EXPECT_TRUE(absl::StartsWith(hello->calibration(1 + plan.groups.size()),
                               "dropped=[" + absl::StrJoin(plan.drops[1], ",") + "] ok=0 "))
      << hello->calibration(1 + plan.groups.size());
  EXPECT_FALSE(hello->kprof_ok());
  EXPECT_FALSE(hello->kprof_error().empty());
}

}  // namespace
}  // namespace kernelrl::sandbox
