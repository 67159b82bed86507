// The design report reads what trajectories did from their text alone: the
// engineer's episodes (through the actor's rollout loop) parse to their tool
// calls, end in a recognised fp32 design whose reward is the verdict's, and a
// reply that is not JSON counts as a parse error with no kernel.
#include "tools/codemodel/design_report.h"

#include <random>
#include <set>

#include "absl/strings/str_join.h"
#include "common/testing/testing.h"
#include "data/family/family.h"
#include "gtest/gtest.h"
#include "tools/codemodel/corpus.h"

namespace kernelrl::codemodel {
namespace {

TEST(DesignReportTest, EngineerEpisodesParseAndEndInTheirDesign) {
  std::vector<v1::Task> tasks;
  std::map<std::string, std::string> sources;
  std::set<std::string> families;
  for (const auto& ft : data::family::MakeTasks("cpu")) {
    if (ft.held_out || !families.insert(ft.spec.family).second) continue;
    v1::Task t;
    t.set_id(ft.id);
    t.set_reference_source(ft.source);
    (*t.mutable_metadata())["shape"] = absl::StrJoin(ft.shape, "x");
    tasks.push_back(t);
    sources[ft.id] = ft.source;
  }
  agent::EngineerPolicyOptions o;
  o.device = "cpu";
  auto corpus = MakeCorpus(tasks, 2, v1::RolloutConfig(), "", o, std::random_device{}(),
                           kernelrl::testing::NewTempDir("design_report"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  std::vector<TrajectoryFacts> facts;
  for (const v1::Trajectory& t : corpus->trajectories) {
    TrajectoryFacts f = Facts(t, sources.at(t.task_id()), "cpu");
    EXPECT_EQ(f.parse_errors, 0);
    EXPECT_GE(f.assistant_turns, 4);
    EXPECT_GE(f.tool_calls, f.assistant_turns);  // Turn 1 alone writes two files and compiles.
    ASSERT_EQ(f.design.size(), 4u) << f.design;
    EXPECT_EQ(f.design[3], '0') << "the engineer ends in fp32";
    EXPECT_EQ(f.outcome, "OK");
    EXPECT_EQ(f.reward, f.verdict_reward);
    EXPECT_GT(f.model_tokens, 0);
    facts.push_back(f);
  }
  int64_t total = 0;
  for (const auto& [name, n] : corpus->tool_calls) total += n;
  int64_t counted = 0;
  for (const auto& f : facts) counted += f.tool_calls;
  EXPECT_EQ(counted, total);

  v1::Trajectory leased = corpus->trajectories[0];
  leased.set_id("lease-7/engineer-0-g1/0-3");
  EXPECT_EQ(Facts(leased, sources.at(leased.task_id()), "cpu").source, "engineer");
  EXPECT_EQ(facts[0].source, "model");

  // A model's reply that is no JSON tool call: a parse error, no kernel.
  v1::Trajectory bad = corpus->trajectories[0];
  bad.clear_turns();
  auto* turn = bad.add_turns();
  turn->set_role(v1::Turn::ASSISTANT);
  turn->set_content("<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"path\": 3}}\n</tool_call>");
  const TrajectoryFacts g = Facts(bad, sources.begin()->second, "cpu");
  EXPECT_EQ(g.parse_errors, 1);
  EXPECT_EQ(g.design, "none");
  facts.push_back(g);
  const Json s = Summarise(facts, 10);
  EXPECT_EQ(JsonNumber(*FindJson(s, "trajectories")), static_cast<double>(facts.size()));
  EXPECT_EQ(JsonNumber(*FindJson(s, "parse_errors")), 1);
  // Ids without an engineer actor count as the model's: all of these, so every family has designs.
  EXPECT_EQ(FindJson(s, "designs_by_family")->size(), 3u);
  EXPECT_EQ(JsonNumber(*FindJson(*FindJson(*FindJson(s, "by_source"), "model"), "trajectories")),
            static_cast<double>(facts.size()));
}

}  // namespace
}  // namespace kernelrl::codemodel
