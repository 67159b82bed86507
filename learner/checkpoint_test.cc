// Checkpoints: round trip of weights, optimizer state, RNG and version;
// a crashed save leaves LATEST on the last good checkpoint; a damaged file
// is caught by the manifest.
#include "learner/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "gtest/gtest.h"
#include "learner/safetensors.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

ModelConfig Tiny() {
  ModelConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  return c;
}

TEST(CheckpointTest, RoundTripsWeightsOptimizerRngAndVersion) {
  const std::string root = testing::TempDir() + "/ckpt_rt";
  auto policy = Transformer::Create(Tiny(), Head::kLanguageModel, {}, 1);
  auto critic = Transformer::Create(Tiny(), Head::kValue, {}, 2);
  ASSERT_TRUE(policy.ok() && critic.ok());
  CheckpointToSave c;
  c.policy_version = 41;
  c.step = 7;
  c.policy = policy->get();
  c.critic = critic->get();
  at::Tensor m1 = at::randn({3, 4});
  c.optimizer["adam.exp_avg.0"] = m1;
  c.optimizer["step"] = at::tensor(std::vector<int64_t>{7});
  auto dir = SaveCheckpoint(root, c);
  ASSERT_TRUE(dir.ok()) << dir.status();
  at::Tensor after_save = at::rand({5});  // Drawn from the generator state saved above.

  auto loaded = LoadLatestCheckpoint(root);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(at::equal(at::rand({5}), after_save)) << "RNG state not restored";
  EXPECT_EQ(loaded->policy_version, 41);
  EXPECT_EQ(loaded->step, 7);
  EXPECT_TRUE(at::equal(loaded->optimizer.at("adam.exp_avg.0"), m1));
  EXPECT_EQ(loaded->optimizer.at("step").item<int64_t>(), 7);
  auto p = Transformer::Load(loaded->policy_dir, Head::kLanguageModel, {});
  auto v = Transformer::Load(loaded->critic_dir, Head::kValue, {});
  ASSERT_TRUE(p.ok() && v.ok()) << p.status() << v.status();
  at::Tensor ids = at::randint(0, 50, {2, 6}, at::kLong);
  EXPECT_TRUE(at::equal((*p)->Logits(ids), (*policy)->Logits(ids)));
}

TEST(CheckpointTest, CrashedSaveKeepsLastGoodAndDamageIsDetected) {
  const std::string root = testing::TempDir() + "/ckpt_crash";
  auto policy = Transformer::Create(Tiny(), Head::kLanguageModel, {}, 3);
  ASSERT_TRUE(policy.ok());
  CheckpointToSave c;
  c.policy = policy->get();
  c.policy_version = 1;
  c.step = 1;
  c.keep_last = 2;
  ASSERT_TRUE(SaveCheckpoint(root, c).ok());
  // A save that died midway: a temporary directory with half a checkpoint.
  const std::string tmp = root + "/.tmp-step-00000002-999";
  ::mkdir(tmp.c_str(), 0755);
  ASSERT_TRUE(WriteFileAtomically(tmp + "/state.safetensors", "partial").ok());
  auto latest = LoadLatestCheckpoint(root);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 1);
  // The next save cleans up and moves LATEST; retention keeps two.
  for (int step = 2; step <= 4; ++step) {
    c.step = step;
    c.policy_version = step;
    ASSERT_TRUE(SaveCheckpoint(root, c).ok());
  }
  EXPECT_NE(::access(tmp.c_str(), F_OK), 0) << "crash leftovers not removed";
  EXPECT_NE(::access((root + "/step-00000002").c_str(), F_OK), 0) << "retention";
  latest = LoadLatestCheckpoint(root);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->policy_version, 4);
  // Truncating a weight file is caught by the manifest.
  const std::string weights = latest->policy_dir + "/model.safetensors";
  ASSERT_EQ(::truncate(weights.c_str(), 100), 0);
  auto damaged = LoadLatestCheckpoint(root);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(damaged.status().message()).find("model.safetensors"), std::string::npos);
  // And the model loader alone also refuses it.
  EXPECT_FALSE(Transformer::Load(latest->policy_dir, Head::kLanguageModel, {}).ok());
}

TEST(CheckpointTest, PolicyExportsKeepTheTwoNewestUntilAFullCheckpointCoversThem) {
  const std::string root = testing::TempDir() + "/ckpt_exports";
  auto policy = Transformer::Create(Tiny(), Head::kLanguageModel, {}, 4);
  ASSERT_TRUE(policy.ok());
  for (int64_t step = 1; step <= 4; ++step) {
    auto dir = SavePolicyExport(root, step, **policy);
    ASSERT_TRUE(dir.ok()) << dir.status();
    EXPECT_TRUE(Transformer::Load(*dir, Head::kLanguageModel, {}).ok()) << *dir;
  }
  EXPECT_EQ(ListDir(root + "/exports"), (std::vector<std::string>{"step-00000003", "step-00000004"}));
  DropPolicyExports(root, 3);
  EXPECT_EQ(ListDir(root + "/exports"), (std::vector<std::string>{"step-00000004"}));
}

}  // namespace
}  // namespace kernelrl::learner
