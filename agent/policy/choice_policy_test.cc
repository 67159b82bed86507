// The choice vocabulary: replies -> choices (every reply is an action, '.'
// submits), choices -> the normal Write/Write/Profile calls with the rendered
// template, the random policy's draws cover every option.
#include "agent/policy/choice_policy.h"

#include <map>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kernelrl::agent {
namespace {

// A family task as the templates see it: only the header line matters.
v1::Task CpuTask(const std::string& family, const std::string& ops) {
  v1::Task task;
  task.set_id(family + "_" + ops);
  task.set_reference_source(std::string(family::kTaskHeader) + family + " ops=" + ops + "\nimport torch\n");
  task.mutable_inputs()->set_device("cpu");
  return task;
}

TEST(ChoicePolicy, RepliesMapToChoices) {
  const std::vector<family::Slot> slots = *family::Slots("elementwise");  // 3, 3, 3, 2 options
  family::Choice c{};
  ASSERT_TRUE(ChoicePolicy::ReplyChoice("2103", slots, &c));
  EXPECT_EQ(c, (family::Choice{2, 1, 0, 1}));  // '3' = 51, 51 % 2 = 1
  ASSERT_TRUE(ChoicePolicy::ReplyChoice(" 2 1\n0 0 trailing", slots, &c));
  EXPECT_EQ(c, (family::Choice{2, 1, 0, 0}));
  ASSERT_TRUE(ChoicePolicy::ReplyChoice("5", slots, &c));  // short: the rest option 0 ('0' = 48)
  EXPECT_EQ(c, (family::Choice{2, 0, 0, 0}));
  ASSERT_TRUE(ChoicePolicy::ReplyChoice("zq!~", slots, &c));  // any characters are some action
  EXPECT_EQ(c, (family::Choice{'z' % 3, 'q' % 3, '!' % 3, '~' % 2}));
  EXPECT_FALSE(ChoicePolicy::ReplyChoice("", slots, &c));
  EXPECT_FALSE(ChoicePolicy::ReplyChoice("  . done", slots, &c));
}

TEST(ChoicePolicy, ChoiceBecomesTheNormalToolCalls) {
  ChoicePolicy policy(nullptr, nullptr, 0, "", 0);
  const v1::Task task = CpuTask("rowreduce", "softmax");
  auto calls = policy.ToolCalls(task, "2101");
  ASSERT_TRUE(calls.ok()) << calls.status();
  ASSERT_EQ(calls->size(), 3u);
  EXPECT_EQ((*calls)[0].name, "Write");
  EXPECT_EQ(FindJson((*calls)[0].arguments, "path")->get<std::string>(), "kernels/rowreduce.cc");
  EXPECT_TRUE(absl::StrContains(FindJson((*calls)[0].arguments, "content")->get<std::string>(),
                                "strategy=block block=256 vec=1 precision=fp16"));
  EXPECT_TRUE(absl::StrContains((*calls)[0].arguments_json, "\"path\": \"kernels/rowreduce.cc\""));
  EXPECT_EQ(FindJson((*calls)[1].arguments, "path")->get<std::string>(), "model_new.py");
  EXPECT_EQ((*calls)[2].name, "Profile");
  // The device override renders CUDA whatever the task says; a submit is no call.
  ChoicePolicy cuda(nullptr, nullptr, 0, "cuda", 0);
  EXPECT_EQ(FindJson((*cuda.ToolCalls(task, "0000"))[0].arguments, "path")->get<std::string>(), "kernels/rowreduce.cu");
  EXPECT_TRUE(policy.ToolCalls(task, ".")->empty());
  v1::Task plain = task;
  plain.set_reference_source("import torch\n");
  EXPECT_FALSE(policy.ToolCalls(plain, "0000").ok());
}

TEST(ChoicePolicy, RandomPolicyDrawsEveryOptionAndSubmits) {
  ChoicePolicy policy(nullptr, nullptr, 0, "", 0);
  const std::vector<family::Slot> slots = *family::Slots("gemm_epilogue");
  std::map<int, std::map<int, int>> counts;  // slot -> option -> draws
  int second = 0;
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    family::Choice c{};
    ASSERT_TRUE(ChoicePolicy::ReplyChoice(policy.RandomReply(0, seed), slots, &c));
    for (int i = 0; i < family::kNumSlots; ++i) ++counts[i][c[i]];
    second += policy.RandomReply(1, seed) != ".";
    EXPECT_EQ(policy.RandomReply(2, seed), ".");
  }
  for (int i = 0; i < family::kNumSlots; ++i) {
    for (int o = 0; o < static_cast<int>(slots[i].options.size()); ++o) {
      // Uniform: 600 / 3 = 200 or 600 / 2 = 300 expected; 5 sigma is well inside these bounds.
      EXPECT_GT(counts[i][o], 600 / static_cast<int>(slots[i].options.size()) - 80) << slots[i].name << " " << o;
    }
  }
  EXPECT_GT(second, 120);  // about a third
  EXPECT_LT(second, 280);
}

}  // namespace
}  // namespace kernelrl::agent
