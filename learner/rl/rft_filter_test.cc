#include "learner/rl/rft_filter.h"

#include "gtest/gtest.h"

namespace kernelrl::learner::rl {
namespace {

// Each turn gets 3 tokens (the assistant's trained), in order.
v1::Trajectory With(double reward, std::vector<std::string> assistant_turns) {
  v1::Trajectory t;
  t.set_reward(reward);
  auto add = [&t](v1::Turn::Role role, const std::string& content) {
    v1::Turn* turn = t.add_turns();
    turn->set_role(role);
    turn->set_content(content);
    turn->set_token_begin(t.token_ids_size());
    for (int k = 0; k < 3; ++k) {
      t.add_token_ids(t.token_ids_size());
      t.add_loss_mask(role == v1::Turn::ASSISTANT);
      t.add_logprobs(role == v1::Turn::ASSISTANT ? -0.5f : 0.0f);
    }
    turn->set_token_end(t.token_ids_size());
  };
  for (const std::string& c : assistant_turns) {
    add(v1::Turn::ASSISTANT, c);
    add(v1::Turn::TOOL, "<tool_call> output text is not parsed");
  }
  t.mutable_stats()->set_num_turns(t.turns_size());
  return t;
}

std::string RftRejection(const v1::Trajectory& t, int max_repeated_calls) {
  return ChooseForRft(t, max_repeated_calls).rejection;
}

std::string Call(const std::string& cmd) {
  return "Running it.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"" + cmd + "\"}}\n</tool_call>";
}

TEST(RftFilterTest, OutcomeAndPatternFilters) {
  EXPECT_EQ(RftRejection(With(2, {Call("nvcc k.cu"), Call("python verify.py"), "Done."}), 3), "");
  EXPECT_EQ(RftRejection(With(-1, {Call("nvcc k.cu")}), 3), "reward <= 0");
  EXPECT_EQ(ChooseForRft(With(-1, {Call("nvcc k.cu")}), 3).dropped_as, "rft_dropped_reward");
  EXPECT_EQ(ChooseForRft(With(3, std::vector<std::string>(4, Call("python verify.py"))), 3).dropped_as, "rft_dropped_loop");
  EXPECT_EQ(ChooseForRft(With(1, {"<tool_call>\n{\"name\": \"Bash\""}), 3).dropped_as, "rft_dropped_schema");
  EXPECT_EQ(ChooseForRft(With(2, {Call("nvcc k.cu")}), 3).dropped_as, "");
  EXPECT_EQ(RftRejection(With(0, {"Done."}), 3), "reward <= 0");
  std::string broken = RftRejection(With(3, {"<tool_call>\n{\"name\": \"bash\", \"arguments\": {}}\n</tool_call>", Call("ls")}), 3);
  EXPECT_NE(broken.find("breaks the schema"), std::string::npos) << broken;
  EXPECT_NE(RftRejection(With(1, {"<tool_call>\n{\"name\": \"Bash\""}), 3).find("breaks the schema"), std::string::npos);
  std::vector<std::string> loop(4, Call("python verify.py"));
  std::string looped = RftRejection(With(3, loop), 3);
  EXPECT_NE(looped.find("redundant loop"), std::string::npos) << looped;
  loop.pop_back();
  EXPECT_EQ(RftRejection(With(3, loop), 3), "");  // Three times is allowed.
  // Profile after each edit is the next evaluation; four Profiles of the same files are a loop.
  const std::string profile = "<tool_call>\n{\"name\": \"Profile\", \"arguments\": {}}\n</tool_call>";
  std::vector<std::string> revise;
  for (int i = 0; i < 5; ++i) {
    revise.push_back("<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"path\": \"k.cu\", \"content\": \"v" +
                     std::to_string(i) + "\"}}\n</tool_call>\n" + profile);
  }
  EXPECT_EQ(RftRejection(With(3, revise), 3), "");
  std::vector<std::string> stuck(4, profile);
  EXPECT_NE(RftRejection(With(3, stuck), 3).find("redundant loop: Profile"), std::string::npos);
}

const char kBroken[] = "<tool_call>\n{\"name\": \"arguments\": \"arguments\": {}}\n</tool_call>";
const char kVerify[] = "<tool_call>\n{\"name\": \"Verify\", \"arguments\": {}}\n</tool_call>";

TEST(RftFilterTest, ABrokenTailAfterTheWorkIsCutAndItsPrefixKept) {
  const v1::Trajectory t = With(2, {Call("nvcc k.cu"), kVerify, kBroken, kBroken, kVerify, kBroken});
  const RftChoice c = ChooseForRft(t, 3);
  EXPECT_EQ(c.rejection, "");
  EXPECT_EQ(c.turns, 4);  // two assistant turns and their tool results
  const v1::Trajectory p = RftPrefix(t, c.turns);
  ASSERT_EQ(p.turns_size(), 4);
  EXPECT_EQ(p.turns(3).role(), v1::Turn::TOOL);
  EXPECT_EQ(p.token_ids_size(), 12);
  EXPECT_EQ(p.loss_mask_size(), 12);
  EXPECT_EQ(p.logprobs_size(), 12);
  EXPECT_EQ(p.stats().num_turns(), 4);
  EXPECT_EQ(p.reward(), 2);
  EXPECT_EQ(p.token_ids(11), 11);
  // A trajectory with nothing broken is kept whole.
  const v1::Trajectory whole = With(2, {Call("nvcc k.cu"), kVerify});
  EXPECT_EQ(ChooseForRft(whole, 3).turns, 4);
  EXPECT_EQ(RftPrefix(whole, 4).SerializeAsString(), whole.SerializeAsString());
}

TEST(RftFilterTest, ABrokenTurnFollowedByAChangeToTheFilesDropsTheTrajectory) {
  // The reward is of the files after the Write: the prefix before the break did not earn it.
  std::string why = RftRejection(With(2, {Call("nvcc k.cu"), kBroken, Call("sed -i s/a/b/ k.cu")}), 3);
  EXPECT_NE(why.find("breaks the schema"), std::string::npos) << why;
  EXPECT_NE(why.find("a Bash call after it"), std::string::npos) << why;
  const std::string write = "<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"path\": \"k.cu\", \"content\": \"x\"}}\n</tool_call>";
  EXPECT_NE(RftRejection(With(2, {kVerify, kBroken, write}), 3).find("a Write call after it"), std::string::npos);
  // Nothing before the break: nothing to keep.
  EXPECT_NE(RftRejection(With(2, {kBroken, kVerify}), 3).find("breaks the schema"), std::string::npos);
  // The loop check counts only the kept turns.
  std::vector<std::string> looped(4, kVerify);
  looped.insert(looped.begin() + 2, kBroken);
  EXPECT_EQ(RftRejection(With(2, looped), 3), "");
  EXPECT_EQ(ChooseForRft(With(2, looped), 3).turns, 4);
}

}  // namespace
}  // namespace kernelrl::learner::rl
