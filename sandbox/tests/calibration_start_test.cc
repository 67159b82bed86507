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

// A VerifyStage for the CUDA backend (on a machine without a GPU every probe fails).
SandboxConfig CudaConfig(const std::string& python) {
  SandboxConfig config = testing::CpuConfig(python);
  config.set_backend("cuda");
  config.set_kprof_lib(testing::Cwd() + "/profiler_service/libkprof.so");
  config = WithDefaults(config);
  mkdir(config.work_root().c_str(), 0700);
  return config;
}

// The probes a zygote of `config` ran so far, by the zygotes' shared log.
int ProbesRun(const SandboxConfig& config) {
  absl::StatusOr<std::string> log = ReadFileToString(config.work_root() + "/zygote.log");
  int n = 0;
  for (size_t at = log.ok() ? log->find("[calibrate]") : std::string::npos; at != std::string::npos;
       at = log->find("[calibrate]", at + 1)) {
    ++n;
  }
  return n;
}

TEST(CalibrationStartTest, ZygoteAnswersEveryProbeTheWorkerAsksFor) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch";
  const SandboxConfig config = CudaConfig(python);
  ASSERT_FALSE(config.profiler_root().empty()) << "the profiler harness is in the runfiles";
  const int caps = ProbeHostCapabilities();
  auto stage = std::make_unique<VerifyStage>(config, config.harness_dir(), config.contain_lib(), caps);
  // Spawned (as a worker spawns all its zygotes at once): the zygote said hello
  // and has been asked for no probe yet; EnsureStarted asks for them.
  ASSERT_TRUE(stage->Spawn().ok());
  EXPECT_EQ(ProbesRun(config), 0);
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

// A worker's other zygotes take the first one's calibration, and a zygote
// started again after it died keeps its own: no probe runs once jobs may be
// using the GPU.
TEST(CalibrationStartTest, OtherZygotesAndARestartProbeNothing) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch";
  const SandboxConfig config = CudaConfig(python);
  const int caps = ProbeHostCapabilities();
  VerifyStage first(config, config.harness_dir(), config.contain_lib(), caps);
  absl::StatusOr<v1::sandbox::HarnessHello> a = first.EnsureStarted();
  ASSERT_TRUE(a.ok()) << a.status();
  const int probes = ProbesRun(config);
  ASSERT_GE(probes, 3) << "isolation, recorder and copy probes";
  ASSERT_TRUE(first.calibration().has_value());

  VerifyStage second(config, config.harness_dir(), config.contain_lib(), caps);
  second.UseCalibration(*first.calibration());
  absl::StatusOr<v1::sandbox::HarnessHello> b = second.EnsureStarted();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(ProbesRun(config), probes) << "the second zygote probed";
  EXPECT_NE(b->pid(), a->pid());
  EXPECT_EQ(absl::StrJoin(b->calibration(), "\n"), absl::StrJoin(a->calibration(), "\n"));
  EXPECT_EQ(absl::StrJoin(b->isolation_dropped_for_cuda(), ","), absl::StrJoin(a->isolation_dropped_for_cuda(), ","));
  EXPECT_EQ(b->kprof_ok(), a->kprof_ok());
  EXPECT_EQ(b->kprof_error(), a->kprof_error());

  // The first zygote dies; the job that finds out fails, and the next start probes nothing.
  ASSERT_TRUE(testing::KillZygote(a->pid()));
  v1::sandbox::HarnessJob job;
  job.set_wall_seconds(30);
  EXPECT_FALSE(first.Health(job, 60).ok());
  absl::StatusOr<v1::sandbox::HarnessHello> again = first.EnsureStarted();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->pid(), a->pid());
  EXPECT_EQ(ProbesRun(config), probes) << "the restarted zygote probed";
  EXPECT_EQ(absl::StrJoin(again->calibration(), "\n"), absl::StrJoin(a->calibration(), "\n"));
}

}  // namespace
}  // namespace kernelrl::sandbox
