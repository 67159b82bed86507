// ValidateLearnConfig: the learner's device and dtype follow --backend and
// --learner_device unless the preset sets them; bad values are errors.
// LearnerArgs: the flags the learner process is started with.
#include <algorithm>

#include "gtest/gtest.h"
#include "tools/cli/learn_cluster.h"

namespace kernelrl::cli {
namespace {

v1::LearnConfig Minimal(const std::string& backend, const std::string& learner_device) {
  v1::LearnConfig o;
  o.set_base_checkpoint("/ckpt");
  o.set_family_dir("/family");
  o.set_backend(backend);
  o.set_learner_device(learner_device);
  o.set_rollouts_per_task(4);
  o.set_skill_text("skill");
  o.mutable_job();
  return o;
}

TEST(LearnConfigTest, DtypeFollowsTheLearnersDevice) {
  struct Case { const char* backend; const char* learner; const char* device; const char* dtype; };
  for (const Case& c : {Case{"cpu", "", "cpu", "float32"}, Case{"cuda", "cpu", "cpu", "float32"},
                        Case{"cuda", "", "cuda", "bfloat16"}, Case{"cuda", "cuda:1", "cuda", "bfloat16"}}) {
    v1::LearnConfig o = Minimal(c.backend, c.learner);
    ASSERT_TRUE(ValidateLearnConfig(&o).ok()) << c.backend << " " << c.learner;
    EXPECT_EQ(o.job().device().device(), c.device) << c.backend << " " << c.learner;
    EXPECT_EQ(o.job().device().dtype(), c.dtype) << c.backend << " " << c.learner;
  }
}

TEST(LearnConfigTest, APresetsDtypeStaysAndABadOneIsRefused) {
  v1::LearnConfig o = Minimal("cuda", "");
  o.mutable_job()->mutable_device()->set_dtype("float32");
  ASSERT_TRUE(ValidateLearnConfig(&o).ok());
  EXPECT_EQ(o.job().device().dtype(), "float32");
  o.mutable_job()->mutable_device()->set_dtype("fp8");
  absl::Status s = ValidateLearnConfig(&o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("fp8"), std::string::npos) << s;
}

TEST(LearnConfigTest, ALearnerOnASandboxWorkersGpuSharesItsLease) {
  // Worker i times on GPU i; the learner on "cuda" is on GPU 0.
  struct Case { const char* backend; const char* learner; int worker; bool shares; };
  for (const Case& c : {Case{"cuda", "", 0, true}, Case{"cuda", "cuda", 0, true}, Case{"cuda", "cuda:0", 0, true},
                        Case{"cuda", "cuda:1", 0, false}, Case{"cuda", "cuda:1", 1, true}, Case{"cuda", "cuda", 1, false},
                        Case{"cuda", "cpu", 0, false}, Case{"cpu", "", 0, false}, Case{"cpu", "", 1, false}}) {
    v1::LearnConfig o = Minimal(c.backend, c.learner);
    ASSERT_TRUE(ValidateLearnConfig(&o).ok()) << c.backend << " " << c.learner;
    EXPECT_EQ(LearnerSharesSandboxGpu(o, c.worker), c.shares) << c.backend << " " << c.learner << " " << c.worker;
  }
}

TEST(LearnConfigTest, SandboxWorkersStartAtTheirFirstGpu) {
  // Jobs side by side: this one's worker on GPU 2, its learner on GPU 3, none sharing.
  v1::LearnConfig o = Minimal("cuda", "cuda:3");
  o.set_sandbox_first_gpu(2);
  ASSERT_TRUE(ValidateLearnConfig(&o).ok());
  EXPECT_EQ(SandboxWorkerGpu(o, 0), 2);
  EXPECT_FALSE(LearnerSharesSandboxGpu(o, 0));
  o.set_sandbox_workers(2);  // its second worker times on GPU 3, the learner's
  EXPECT_EQ(SandboxWorkerGpu(o, 1), 3);
  EXPECT_TRUE(LearnerSharesSandboxGpu(o, 1));
  o.set_learner_device("cuda");  // the learner on GPU 0: no worker there
  EXPECT_FALSE(LearnerSharesSandboxGpu(o, 0));
  o.set_sandbox_first_gpu(-1);
  absl::Status s = ValidateLearnConfig(&o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("sandbox_first_gpu"), std::string::npos) << s;
}

TEST(LearnConfigTest, LearnerArgsCarryTheAttentionBackendAndTheLease) {
  auto has = [](const std::vector<std::string>& args, const std::string& a) {
    return std::find(args.begin(), args.end(), a) != args.end();
  };
  v1::LearnConfig o = Minimal("cuda", "cuda:1");
  o.mutable_paths()->set_run_dir("/run");
  ASSERT_TRUE(ValidateLearnConfig(&o).ok());
  std::vector<std::string> args = LearnerArgs(o);
  EXPECT_FALSE(has(args, "--set=sdpa_cudnn=true"));
  EXPECT_FALSE(has(args, "--set=gpu_lease_path=/run/gpu.lease"));  // GPU 1 is no sandbox worker's
  EXPECT_TRUE(has(args, "--set=policy.device=cuda"));
  o.set_learner_sdpa_cudnn(true);
  o.set_sandbox_workers(2);  // worker 1 times on the learner's GPU
  args = LearnerArgs(o);
  EXPECT_TRUE(has(args, "--set=sdpa_cudnn=true"));
  EXPECT_EQ(std::count(args.begin(), args.end(), "--set=gpu_lease_path=/run/gpu.lease"), 1);
}

// On one GPU the learner trains there (under the lease) and the policy server may sample on the
// CPU, in float32; the job's trainer keeps the GPU's bf16.
TEST(LearnConfigTest, PolicyServerOnTheCpuBesideAGpuLearner) {
  auto has = [](const std::vector<std::string>& args, const std::string& a) {
    return std::find(args.begin(), args.end(), a) != args.end();
  };
  v1::LearnConfig o = Minimal("cuda", "cuda");
  o.mutable_paths()->set_run_dir("/run");
  o.set_policy_device("cpu");
  ASSERT_TRUE(ValidateLearnConfig(&o).ok());
  EXPECT_EQ(o.job().device().device(), "cuda");
  EXPECT_EQ(o.job().device().dtype(), "bfloat16");
  std::vector<std::string> args = LearnerArgs(o);
  EXPECT_TRUE(has(args, "--set=policy.device=cpu"));
  EXPECT_TRUE(has(args, "--set=policy.dtype=float32"));
  EXPECT_TRUE(has(args, "--set=gpu_lease_path=/run/gpu.lease"));  // The trainer's steps still take it.
  o.set_policy_device("");
  args = LearnerArgs(o);
  EXPECT_TRUE(has(args, "--set=policy.device=cuda"));
  EXPECT_TRUE(has(args, "--set=policy.dtype=bfloat16"));
  o.set_policy_device("cuda:2");
  absl::Status s = ValidateLearnConfig(&o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("policy_device"), std::string::npos) << s;
}

TEST(LearnConfigTest, OneSandboxWorkerUnlessTold) {
  v1::LearnConfig o = Minimal("cpu", "");
  ASSERT_TRUE(ValidateLearnConfig(&o).ok());
  EXPECT_EQ(o.sandbox_workers(), 1);
  o.set_sandbox_workers(-2);
  absl::Status s = ValidateLearnConfig(&o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("sandbox_workers"), std::string::npos) << s;
}

TEST(LearnConfigTest, PposTemperatureIsTheActorsUnlessItContradictsThem) {
  v1::LearnConfig o = Minimal("cpu", "");
  o.mutable_rollout()->set_temperature(0.7);
  ASSERT_TRUE(ValidateLearnConfig(&o).ok());
  EXPECT_NEAR(o.job().ppo().temperature(), 0.7, 1e-6);
  ASSERT_TRUE(ValidateLearnConfig(&o).ok());  // the same figure named twice
  o.mutable_job()->mutable_ppo()->set_temperature(1.0);
  absl::Status s = ValidateLearnConfig(&o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("rollout.temperature"), std::string::npos) << s;
}

TEST(LearnConfigTest, TheWarmUpsPoolFollowsThePoliciesItTakes) {
  v1::LearnConfig o = Minimal("cuda", "");
  auto* warmup = o.mutable_job()->mutable_recipe()->mutable_agent_warmup();
  EXPECT_EQ(PoolForStage(o, "agent_warmup"), "engineer");  // the family preset's own rule: "scripted"
  warmup->add_take_policies("scripted");
  EXPECT_EQ(PoolForStage(o, "agent_warmup"), "engineer");
  warmup->add_take_policies("model");  // self_warmup merged over the family preset
  EXPECT_EQ(PoolForStage(o, "agent_warmup"), "actor");
  for (const char* stage : {"single_turn_ppo", "rft", "value_pretrain", "agentic_ppo"}) {
    EXPECT_EQ(PoolForStage(o, stage), "actor") << stage;
  }
}

}  // namespace
}  // namespace kernelrl::cli
