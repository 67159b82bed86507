// A zygote that dies between jobs (OOM-killed, killed by an operator) costs
// the next job an error and is started again; it never ends the worker. A
// write to its closed stdin raised SIGPIPE, whose default action killed the
// whole worker process before VerifyStage could report the closed pipe.
#include <sys/stat.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sandbox/contain/contain.h"
#include "sandbox/tests/e2e_util.h"
#include "sandbox/verify_stage.h"

namespace kernelrl::sandbox {
namespace {

TEST(ZygoteLossTest, ADeadZygoteIsAnErrorAndIsStartedAgain) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch";
  SandboxConfig config = WithDefaults(testing::CpuConfig(python));
  mkdir(config.work_root().c_str(), 0700);
  VerifyStage stage(config, config.harness_dir(), config.contain_lib(), ProbeHostCapabilities());
  absl::StatusOr<v1::sandbox::HarnessHello> hello = stage.EnsureStarted();
  ASSERT_TRUE(hello.ok()) << hello.status();
  v1::sandbox::HarnessJob job;
  job.set_wall_seconds(60);
  absl::StatusOr<v1::sandbox::HarnessHealthReply> first = stage.Health(job, 90);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->healthy()) << first->error();

  ASSERT_TRUE(testing::KillZygote(hello->pid()));
  absl::StatusOr<v1::sandbox::HarnessHealthReply> lost = stage.Health(job, 90);
  EXPECT_FALSE(lost.ok()) << "a job sent to a dead zygote cannot have been answered";

  absl::StatusOr<v1::sandbox::HarnessHello> again = stage.EnsureStarted();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->pid(), hello->pid()) << "a new zygote";
  absl::StatusOr<v1::sandbox::HarnessHealthReply> after = stage.Health(job, 90);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->healthy()) << after->error();
}

}  // namespace
}  // namespace kernelrl::sandbox
