#include "learner/rl/rft_filter.h"

#include "gtest/gtest.h"

namespace kernelrl::learner::rl {
namespace {

v1::Trajectory With(double reward, std::vector<std::string> assistant_turns) {
  v1::Trajectory t;
  t.set_reward(reward);
  for (const std::string& c : assistant_turns) {
    v1::Turn* turn = t.add_turns();
    turn->set_role(v1::Turn::ASSISTANT);
    turn->set_content(c);
    v1::Turn* tool = t.add_turns();
    tool->set_role(v1::Turn::TOOL);
    tool->set_content("<tool_call> output text is not parsed");
  }
  return t;
}

std::string Call(const std::string& cmd) {
  return "Running it.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"" + cmd + "\"}}\n</tool_call>";
}

TEST(RftFilterTest, OutcomeAndPatternFilters) {
  EXPECT_EQ(RftRejection(With(2, {Call("nvcc k.cu"), Call("python verify.py"), "Done."}), 3), "");
  EXPECT_EQ(RftRejection(With(-1, {Call("nvcc k.cu")}), 3), "reward <= 0");
  EXPECT_EQ(RftRejection(With(0, {"Done."}), 3), "reward <= 0");
  std::string broken = RftRejection(With(3, {Call("ls"), "<tool_call>\n{\"name\": \"bash\", \"arguments\": {}}\n</tool_call>"}), 3);
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

}  // namespace
}  // namespace kernelrl::learner::rl
