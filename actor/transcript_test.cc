// A trajectory of random turns: its transcript holds every turn's role and
// text in order, the verdicts of the turns that evaluated, and the final one.
#include "actor/transcript.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kernelrl::actor {
namespace {

std::string RandomText(std::mt19937& rng) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz {}\":_\n";
  std::string s = absl::StrCat("t", rng() % 100000, " ");
  for (int i = 0, n = 5 + static_cast<int>(rng() % 40); i < n; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

TEST(TranscriptTest, EveryTurnInOrderWithVerdicts) {
  std::mt19937 rng(std::random_device{}());
  v1::Trajectory t;
  t.set_task_id("heldout/ew_relu-scale_48x45");
  t.set_id("job-1-L7/actor-0/3");
  t.mutable_stats()->set_stop_reason("max_turns");
  t.mutable_final_verdict()->set_outcome(v1::Verdict::BAD_WORKSPACE);
  t.mutable_final_verdict()->set_reward(-1);
  t.mutable_final_verdict()->set_summary("model_new.py (defining ModelNew) is missing");
  const v1::Turn::Role roles[] = {v1::Turn::ASSISTANT, v1::Turn::TOOL};
  std::vector<std::string> texts;
  int pos = 0;
  for (int i = 0, n = 3 + static_cast<int>(rng() % 6); i < n; ++i) {
    v1::Turn* turn = t.add_turns();
    turn->set_role(i == 0 ? v1::Turn::SYSTEM : i == 1 ? v1::Turn::USER : roles[i % 2]);
    turn->set_content(RandomText(rng));
    turn->set_token_begin(pos);
    pos += 1 + static_cast<int>(rng() % 50);
    turn->set_token_end(pos);
    if (turn->role() == v1::Turn::TOOL) {
      turn->set_tool_name("Verify");
      turn->mutable_verdict()->set_outcome(v1::Verdict::WRONG_ANSWER);
      turn->mutable_verdict()->set_summary(absl::StrCat("max abs err ", rng() % 1000));
    }
    texts.push_back(turn->content());
  }
  const std::string text = Transcript(t);
  EXPECT_NE(text.find("task heldout/ew_relu-scale_48x45"), std::string::npos) << text;
  EXPECT_NE(text.find("stopped: max_turns"), std::string::npos) << text;
  EXPECT_NE(text.find("final verdict: BAD_WORKSPACE (reward -1): model_new.py (defining ModelNew) is missing"),
            std::string::npos)
      << text;
  size_t at = 0;
  for (int i = 0; i < t.turns_size(); ++i) {
    const v1::Turn& turn = t.turns(i);
    const size_t header = text.find("=== " + v1::Turn::Role_Name(turn.role()), at);
    ASSERT_NE(header, std::string::npos) << "turn " << i << " in\n" << text;
    const std::string line = text.substr(header, text.find('\n', header) - header);
    if (turn.role() == v1::Turn::ASSISTANT) {
      EXPECT_EQ(line, absl::StrCat("=== ASSISTANT (policy v0, ", turn.token_end() - turn.token_begin(), " tokens)"));
    }
    at = text.find(texts[i], header);
    ASSERT_NE(at, std::string::npos) << "turn " << i << " text in\n" << text;
    if (turn.has_verdict()) {
      const size_t verdict = text.find("[verdict: WRONG_ANSWER (reward 0): " + turn.verdict().summary() + "]\n", at);
      EXPECT_NE(verdict, std::string::npos) << text;
      EXPECT_LT(verdict, i + 1 < t.turns_size() ? text.find(texts[i + 1], at + texts[i].size()) : text.size());
    }
  }
}

TEST(TranscriptTest, FileNameHasNoSlash) {
  EXPECT_EQ(TranscriptFileName("heldout/ew_relu_48x45", 2), "heldout-ew_relu_48x45-2.txt");
  EXPECT_EQ(TranscriptFileName("level1/19_ReLU", 0), "level1-19_ReLU-0.txt");
  EXPECT_EQ(TrajectoryFileName("heldout/ew_relu_48x45", 2), "heldout-ew_relu_48x45-2.pb");
}

}  // namespace
}  // namespace kernelrl::actor
