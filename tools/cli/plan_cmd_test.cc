// `kernelrl plan` on configs written here: a small job fits (exit 0), a 7B
// actor + critic on one GPU does not (exit 1), sharding it over 4 H200s
// does, so do LoRA adapters on one 80 GB GPU at 8K tokens, and a missing
// model or a negative rank is a configuration error (exit 2).
#include "tools/cli/plan_cmd.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"

namespace kernelrl::cli {
namespace {

std::string Model(const std::string& name, int hidden, int inter, int layers, int heads, int kv, int vocab) {
  const std::string dir = ::kernelrl::testing::NewTempDir(name + "_");
  const std::string json = "{\"model_type\": \"qwen2\", \"vocab_size\": " + std::to_string(vocab) +
                           ", \"hidden_size\": " + std::to_string(hidden) + ", \"intermediate_size\": " +
                           std::to_string(inter) + ", \"num_hidden_layers\": " + std::to_string(layers) +
                           ", \"num_attention_heads\": " + std::to_string(heads) + ", \"num_key_value_heads\": " +
                           std::to_string(kv) + "}";
  EXPECT_TRUE(WriteFileAtomically(dir + "/config.json", json).ok());
  return dir;
}

int Plan(std::vector<std::string> args) {
  args.insert(args.begin(), "plan");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return PlanMain(static_cast<int>(argv.size()), argv.data());
}

TEST(PlanCmdTest, FitsRefusesAndRejects) {
  const std::string small = Model("small", 512, 2048, 8, 8, 2, 32000);
  const std::string qwen7b = Model("qwen7b", 3584, 18944, 28, 28, 4, 152064);
  EXPECT_EQ(Plan({"--set=model=" + small, "--set=tokens=4096"}), 0);
  EXPECT_EQ(Plan({"--set=model=" + qwen7b, "--set=sharded=false"}), 1);
  EXPECT_EQ(Plan({"--set=model=" + qwen7b, "--set=gpus=4", "--set=gpu_gib=141"}), 0);
  EXPECT_EQ(Plan({"--set=gpus=4"}), 2);
  // LoRA adapters: the 7B pair on one 80 GB GPU at 8K tokens fits only with them.
  EXPECT_EQ(Plan({"--set=model=" + qwen7b, "--set=sharded=false", "--set=tokens=8192"}), 1);
  EXPECT_EQ(Plan({"--set=model=" + qwen7b, "--set=sharded=false", "--set=tokens=8192", "--set=actor_lora_rank=16",
                  "--set=critic_lora_rank=16"}),
            0);
  EXPECT_EQ(Plan({"--set=model=" + small, "--set=actor_lora_rank=-1"}), 2);
}

}  // namespace
}  // namespace kernelrl::cli
