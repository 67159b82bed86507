// The corpus as the critic's value set: an episode valued by its reward and cut
// after each reply whose Profile it was, valued by what that Profile paid; the
// set written as a job directory the value-pretraining import reads.
#include "tools/codemodel/value_set.h"

#include <random>
#include <string>

#include "common/file.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/rl/ingest.h"
#include "learner/rl/sample.h"
#include "learner/rl/warmup_import.h"
#include "tools/codemodel/corpus.h"
#include "tools/codemodel/test_tasks.h"

namespace kernelrl::codemodel {
namespace {

Json Message(const std::string& role, const std::string& content) {
  return Json::object({{"role", Json(role)}, {"content", Json(content)}});
}

// Two Profiles: the first answers a reply that called it alone, the second a reply that ran a sed and
// then Profile (two tool results after one reply).
Json TwoProfileRecord() {
  Json messages = Json::array({Message("system", "You write kernels."), Message("user", "Task t."),
                               Message("assistant", "Profile it.\n<tool_call>\n{\"name\": \"Profile\"}\n</tool_call>"),
                               Message("tool", "Profile: OK: 0.70x eager\nreward 1\n"),
                               Message("assistant", "Reward 1. Trying vec=4.\n<tool_call>\n{\"name\": \"Bash\"}\n</tool_call>"),
                               Message("tool", "exit status 0\n"),
                               Message("tool", "Profile: OK: 1.30x eager, 1.10x compile\nreward 3\n"),
                               Message("assistant", "Reward 3. Done.")});
  return Json::object({{"task_id", Json("train/t")}, {"family", Json("elementwise")}, {"reward", Json(3.0)},
                       {"tools_announced", Json(true)}, {"messages", std::move(messages)}});
}

TEST(ValueSetTest, AProfileResultStatesItsReward) {
  EXPECT_EQ(*StatedProfileReward("Profile: OK: 1.07x eager\nflags: x\nreward 2\n"), 2);
  EXPECT_EQ(*StatedProfileReward("Profile: WRONG_ANSWER: set 0\nreward -1"), -1);
  EXPECT_EQ(StatedProfileReward("Profile: OK: 1.07x eager\n").status().code(), absl::StatusCode::kNotFound);
}

TEST(ValueSetTest, EachProfileCutsItsReplysPrefixValuedByWhatItPaid) {
  const Json record = TwoProfileRecord();
  auto tok_json = TrainRecordTokenizer({record}, 300);
  ASSERT_TRUE(tok_json.ok()) << tok_json.status();
  auto tok = agent::Tokenizer::FromJson(*tok_json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto formats = RecordFormats::Create(tok->get());
  ASSERT_TRUE(formats.ok()) << formats.status();
  auto rendered = RenderRecord(record, *formats);
  ASSERT_TRUE(rendered.ok()) << rendered.status();

  auto got = ValueTrajectories(record, *formats, /*profile_prefixes=*/true, "r");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  const v1::Trajectory& whole = (*got)[0];
  EXPECT_EQ(whole.reward(), 3);
  EXPECT_EQ(whole.token_ids_size(), static_cast<int>(rendered->ids.size()));
  // The prefixes end where the replies that called the Profiles end (messages 2 and 4).
  EXPECT_EQ((*got)[1].reward(), 1);
  EXPECT_EQ((*got)[1].token_ids_size(), rendered->turns[2].token_end);
  EXPECT_EQ((*got)[2].reward(), 3);
  EXPECT_EQ((*got)[2].token_ids_size(), rendered->turns[4].token_end);
  for (const v1::Trajectory& t : *got) {
    for (int i = 0; i < t.token_ids_size(); ++i) {
      ASSERT_EQ(t.token_ids(i), rendered->ids[i]);
      ASSERT_EQ(t.loss_mask(i), rendered->loss_mask[i]);
    }
    EXPECT_EQ(t.sampling().policy(), "engineer");
    EXPECT_EQ(t.task_id(), "train/t");
    auto s = learner::rl::SampleFromTrajectory(t, (*tok)->vocab_size(), 0);
    ASSERT_TRUE(s.ok()) << s.status();  // every prefix holds model tokens, log-probs 0
  }
  auto alone = ValueTrajectories(record, *formats, /*profile_prefixes=*/false, "r");
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->size(), 1u);
}

// A real corpus written as a value set reads back through the import the recipe uses, one prefix
// per reply a Profile answered, and refuses to be written over.
TEST(ValueSetTest, TheEngineersCorpusReadsBackAsImportedReturns) {
  agent::EngineerPolicyOptions eo;
  eo.device = "cpu";
  const std::vector<v1::Task> tasks = testing::FirstTrainingTaskPerFamily("cpu");
  auto corpus = MakeCorpus(tasks, 2, v1::RolloutConfig(), "", eo, std::random_device{}(),
                           kernelrl::testing::NewTempDir("value_set_ws"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const std::string dir = kernelrl::testing::NewTempDir("value_set_corpus");
  std::string lines;
  int64_t replies_profiled = 0;
  for (const Json& r : corpus->records) {
    lines += DumpJson(r) + "\n";
    bool profiled = false;  // since the last reply
    for (const Json& m : *FindJson(r, "messages")) {
      const std::string role = FindJson(m, "role")->get<std::string>();
      const std::string content = FindJson(m, "content")->get<std::string>();
      if (role == "assistant") replies_profiled += profiled, profiled = false;
      if (role == "tool" && content.rfind("Profile:", 0) == 0 && content.find("\nreward ") != std::string::npos) {
        profiled = true;
      }
    }
    replies_profiled += profiled;
  }
  ASSERT_GT(replies_profiled, 0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/corpus.jsonl", lines).ok());
  auto tok = TrainRecordTokenizer(corpus->records, 300);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer.json", *tok).ok());

  const std::string out = kernelrl::testing::NewTempDir("value_set_out") + "/set";
  auto summary = WriteValueSet(dir + "/corpus.jsonl", dir + "/tokenizer.json", true, out);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->episodes, static_cast<int64_t>(corpus->records.size()));
  EXPECT_EQ(summary->prefixes, replies_profiled);

  // The set is its own base checkpoint as far as the tokenizer goes: a job on that tokenizer imports it.
  auto read = learner::rl::ReadAcceptedTrajectories(out, out, {});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), summary->rewards.size());
  for (size_t i = 0; i < read->size(); ++i) EXPECT_EQ((*read)[i].reward(), summary->rewards[i]);
  EXPECT_EQ((*read)[0].reward(), corpus->trajectories[0].reward());

  auto again = WriteValueSet(dir + "/corpus.jsonl", dir + "/tokenizer.json", true, out);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
}

}  // namespace
}  // namespace kernelrl::codemodel
