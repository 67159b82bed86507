// The op probe: where a reply names its task's ops (both ways summaries and
// headers have been written), and that a model is probed at every one of
// them that the model wrote, on the engineer's own episodes.
#include "tools/codemodel/op_probe.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "agent/family/templates.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/test_util.h"
#include "tools/codemodel/corpus.h"
#include "tools/codemodel/render.h"
#include "tools/codemodel/test_tasks.h"

namespace kernelrl::codemodel {
namespace {

TEST(OpProbeTest, MentionsAreTheTasksOpsWhereTheTextNamesThem) {
  const std::string text =
      "     1\t# kernelrl-family: gemm_epilogue ops=relu,tanh\n"
      "<|im_start|>assistant\nThe task is gemm_epilogue: relu -> tanh. My first design\n"
      "{\"content\": \"// kernelrl family template: gemm_epilogue: relu -> tanh; choice 1000: gemm=cublas\\n"
      "__device__ float act(float v) {\\n  // relu\\n  v = fmaxf(v, 0.f);\\n  // tanh\\n  v = tanhf(v);\\n"
      "  // abs\\n  // Half precision loses the tail\\n}\"}\n"
      "The task is gemm_epilogue (relu -> tanh). Before, the plan read so.\n"
      "// kernelrl family template (CPU): gemm_epilogue (relu -> tanh); choice 0000\n"
      "<|im_start|>assistant\nReward 2: 1.31x eager, 0.87x compile. Trying block=256 instead.\n";
  auto mentions = OpMentions(text);
  ASSERT_TRUE(mentions.ok()) << mentions.status();
  std::vector<std::string> got;
  for (const OpMention& m : *mentions) {
    got.push_back(m.place + ":" + text.substr(m.offset, m.end > m.offset ? m.end - m.offset : 4));
  }
  // Summaries first, then headers, then comment lines each with the expression after it; "// abs" is
  // no op of this task.
  EXPECT_EQ(absl::StrJoin(got, " "),
            "summary_first:relu summary_later:tanh summary_first:relu summary_later:tanh "
            "header_first:relu header_later:tanh header_first:relu header_later:tanh comment:relu "
            "expression:v = fmaxf(v, 0.f); comment:tanh expression:v = tanhf(v); "
            "verdict_reward:2 verdict_figures:2: 1.31x eager, 0.87x compile verdict_decision:Trying");
  EXPECT_FALSE(OpMentions("no task here").ok());
}

// The engineer's episodes (`per_task` a training task of each family), a tokenizer trained on
// them and an untrained tiny model, probed.
struct ProbedEpisodes {
  std::vector<Json> records;
  std::unique_ptr<agent::Tokenizer> tokenizer;
  std::unique_ptr<learner::Transformer> model;
  OpProbeResult result;
};
ProbedEpisodes ProbeEngineerEpisodes(const agent::EngineerPolicyOptions& eo, int per_task) {
  ProbedEpisodes p;
  auto corpus = MakeCorpus(testing::FirstTrainingTaskPerFamily("cuda"), per_task, v1::RolloutConfig(), "", eo,
                           std::random_device{}(), kernelrl::testing::NewTempDir("op_probe_ws"));
  EXPECT_TRUE(corpus.ok()) << corpus.status();
  if (!corpus.ok()) return p;
  p.records = corpus->records;
  auto tok_json = TrainRecordTokenizer(p.records, 512);
  EXPECT_TRUE(tok_json.ok()) << tok_json.status();
  if (!tok_json.ok()) return p;
  auto tok = agent::Tokenizer::FromJson(*tok_json);
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return p;
  p.tokenizer = std::move(*tok);
  auto model = learner::Transformer::Create(learner::testing::TinyQwen2Config(p.tokenizer->vocab_size()),
                                            learner::Head::kLanguageModel, learner::ModelOptions(), 1);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return p;
  p.model = std::move(*model);
  const absl::Status probed = ProbeOpNames(*p.model, *p.tokenizer, p.records, &p.result);
  EXPECT_TRUE(probed.ok()) << probed;
  return p;
}

// One episode of each family's first training task, written without revisions.
ProbedEpisodes ProbeOneEpisodePerFamily() {
  agent::EngineerPolicyOptions eo;
  eo.device = "cuda";
  eo.revisions = 0;
  return ProbeEngineerEpisodes(eo, 1);
}

TEST(OpProbeTest, EveryMentionTheModelWroteIsProbed) {
  ProbedEpisodes p = ProbeOneEpisodePerFamily();
  ASSERT_NE(p.tokenizer, nullptr);
  auto fmt = RecordFormats::Create(p.tokenizer.get());
  ASSERT_TRUE(fmt.ok());
  OpProbeResult& result = p.result;
  EXPECT_EQ(result.records, 3);
  // One plan per episode; each kernel written names its ops in its header and comments.
  EXPECT_EQ(result.by_place["summary_first"].total, 3);
  EXPECT_GE(result.by_place["header_first"].total, 3);
  EXPECT_GT(result.by_place["comment"].total, 0);
  EXPECT_EQ(result.by_place["expression"].total, result.by_place["comment"].total);  // a line after each
  int64_t by_op = 0;
  for (const auto& [op, c] : result.expression_by_op) by_op += c.total;
  EXPECT_EQ(by_op, result.by_place["expression"].total);
  int64_t places = 0, families_total = 0;
  for (const auto& [k, c] : result.by_place) {
    EXPECT_LE(c.right, c.total) << k;
    places += c.total;
  }
  for (const auto& [k, c] : result.by_family) families_total += c.total;
  EXPECT_EQ(places, families_total);
  EXPECT_EQ(result.by_family.size(), 3u);
  // Each place that names an op is counted once by composition too, with its log-probability:
  // below 0, the same sum however the places are grouped, and for a one-token place no lower than
  // -log(vocab) when that token is the model's most likely.
  int64_t compositions_total = 0, op_places = 0;
  double by_place_lp = 0, by_composition_lp = 0;
  for (const auto& [k, c] : result.by_place) {
    if (absl::StartsWith(k, "verdict_")) continue;
    by_place_lp += c.logprob;
    op_places += c.total;
  }
  for (const auto& [k, c] : result.by_composition) {
    compositions_total += c.total;
    by_composition_lp += c.logprob;
    EXPECT_LT(c.logprob, 0) << k;
    EXPECT_TRUE(absl::StartsWith(k, "elementwise: ") || absl::StartsWith(k, "gemm_epilogue: ") ||
                absl::StartsWith(k, "rowreduce: "))
        << k;
  }
  EXPECT_EQ(compositions_total, op_places);
  EXPECT_GT(op_places, 0);
  EXPECT_EQ(result.by_composition.size(), 3u);
  EXPECT_NEAR(by_place_lp, by_composition_lp, 1e-6 * std::abs(by_place_lp));
  const OpProbeCount& first = result.by_place["summary_first"];
  const double uniform = -std::log(static_cast<double>(p.tokenizer->vocab_size()));
  if (first.right == first.total) EXPECT_GE(first.logprob / first.total, uniform);
  EXPECT_GT(first.logprob / first.total, 4 * uniform);  // an untrained model is near uniform, not certain-wrong
  // One record's plan (one summary_first place, one token): its log-probability is what the model
  // gives that token reading only the text before it.
  OpProbeResult one;
  ASSERT_TRUE(ProbeOpNames(*p.model, *p.tokenizer, {p.records[0]}, &one).ok());
  ASSERT_EQ(one.by_place["summary_first"].total, 1);
  auto rendered = RenderRecord(p.records[0], *fmt);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  std::string decoded;
  size_t at = 0;
  const size_t offset = OpMentions(rendered->text)->front().offset;  // summaries come first
  while (decoded.size() + p.tokenizer->Decode({rendered->ids[at]}).size() <= offset) {
    decoded += p.tokenizer->Decode({rendered->ids[at++]});
  }
  const std::vector<int64_t> prefix(rendered->ids.begin(), rendered->ids.begin() + at);
  const at::Tensor last = p.model->Logits(torch::tensor(prefix, torch::kInt64).unsqueeze(0)).squeeze(0)[-1];
  EXPECT_NEAR(one.by_place["summary_first"].logprob,
              last.log_softmax(-1)[rendered->ids[at]].item<double>(), 1e-4);
  const Json json = OpProbeJson(result);
  EXPECT_NEAR(json["by_place"]["summary_first"]["mean_logprob"].get<double>(), first.logprob / first.total, 1e-9);
  // Every mention is in the model's own text (model.py's docstring is no plan or header): each is probed.
  int64_t mentions = 0;
  for (const Json& r : p.records) mentions += static_cast<int64_t>(OpMentions(*RenderedText(r, *fmt))->size());
  EXPECT_EQ(places, mentions);
}

// Each design slot the first plan names gets its options' odds: each option's text scored one row
// at a time from the same prefix here, normalised, equals what the probe gave the options together.
TEST(OpProbeTest, DesignOddsAreTheSlotsOptionsScoredFromTheFirstPlansPrefix) {
  ProbedEpisodes p = ProbeOneEpisodePerFamily();
  ASSERT_NE(p.model, nullptr);
  auto fmt = RecordFormats::Create(p.tokenizer.get());
  ASSERT_TRUE(fmt.ok());
  ASSERT_EQ(p.result.design_odds.size(), 3u);  // One task a family.
  int slots_checked = 0;
  for (const Json& record : p.records) {
    const std::string task = (*FindJson(record, "task_id")).get<std::string>();
    auto rendered = RenderRecord(record, *fmt);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    const std::string& text = rendered->text;
    std::vector<size_t> start;
    std::string decoded;
    for (int32_t id : rendered->ids) start.push_back(decoded.size()), decoded += p.tokenizer->Decode({id});
    ASSERT_EQ(decoded, text);
    auto spec = agent::family::FindTaskSpec(text);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto slots = agent::family::Slots(spec->family);
    ASSERT_TRUE(slots.ok());
    const size_t reply = text.find("<|im_start|>assistant");
    ASSERT_NE(reply, std::string::npos);
    const auto& odds = p.result.design_odds.at(task);
    for (const agent::family::Slot& slot : *slots) {
      const size_t q = text.find(" " + slot.name + "=", reply);
      if (q == std::string::npos) {
        EXPECT_EQ(odds.count(slot.name), 0u) << task << " " << slot.name;
        continue;
      }
      const size_t value = q + slot.name.size() + 2;
      const size_t t = std::upper_bound(start.begin(), start.end(), value) - start.begin() - 1;
      const std::string before = text.substr(start[t], value - start[t]);
      std::vector<double> score;
      for (const std::string& option : slot.options) {
        std::vector<int64_t> row(rendered->ids.begin(), rendered->ids.begin() + t);
        const std::vector<int32_t> o = p.tokenizer->Encode(before + option);
        row.insert(row.end(), o.begin(), o.end());
        const at::Tensor logp = p.model->Logits(torch::tensor(row, torch::kInt64).unsqueeze(0)).squeeze(0).log_softmax(-1);
        double s = 0;
        for (size_t j = 0; j < o.size(); ++j) s += logp[t - 1 + j][o[j]].item<double>();
        score.push_back(s);
      }
      double z = 0;
      for (double s : score) z += std::exp(s);
      ASSERT_EQ(odds.count(slot.name), 1u) << task << " " << slot.name;
      const DesignOdds& d = odds.at(slot.name);
      EXPECT_EQ(d.n, 1);
      double total = 0;
      for (size_t i = 0; i < slot.options.size(); ++i) {
        EXPECT_NEAR(d.probability.at(slot.options[i]), std::exp(score[i]) / z, 1e-5) << task << " " << slot.name;
        total += d.probability.at(slot.options[i]);
      }
      EXPECT_NEAR(total, 1.0, 1e-9);
      ++slots_checked;
    }
  }
  EXPECT_GE(slots_checked, 3);  // Every first plan names its family's slots.
  const Json json = OpProbeJson(p.result);
  EXPECT_EQ(json["design_odds"].size(), 3u);
}

// A rollout probed as the policy wrote it: its op places as a record's, and where the model first
// would write another token than the rollout's.
TEST(OpProbeTest, ARolloutPartsFromTheModelWhereItsTokenIsNotTheModelsMostLikely) {
  ProbedEpisodes p = ProbeOneEpisodePerFamily();
  ASSERT_NE(p.model, nullptr);
  auto fmt = RecordFormats::Create(p.tokenizer.get());
  ASSERT_TRUE(fmt.ok());
  auto rendered = RenderRecord(p.records[0], *fmt);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  v1::Trajectory t;
  t.set_id("r0");
  for (int32_t id : rendered->ids) t.add_token_ids(id);
  for (int32_t m : rendered->loss_mask) t.add_loss_mask(m);
  // The record's places, probed as a rollout: the same counts as the record's.
  auto whole = ProbeTrajectory(*p.model, *p.tokenizer, t);
  ASSERT_TRUE(whole.ok()) << whole.status();
  OpProbeResult one;
  ASSERT_TRUE(ProbeOpNames(*p.model, *p.tokenizer, {p.records[0]}, &one).ok());
  ASSERT_FALSE(one.by_place.empty());
  for (const auto& [place, c] : one.by_place) {
    EXPECT_EQ(whole->places.by_place[place].right, c.right) << place;
    EXPECT_EQ(whole->places.by_place[place].total, c.total) << place;
    EXPECT_NEAR(whole->places.by_place[place].logprob, c.logprob, 1e-6 + 1e-6 * std::abs(c.logprob)) << place;
  }
  int64_t model_tokens = 0;
  for (size_t k = 1; k < rendered->ids.size(); ++k) model_tokens += rendered->loss_mask[k];
  EXPECT_EQ(whole->divergence.model_tokens, model_tokens);
  EXPECT_GE(whole->divergence.token, 0);  // an untrained model writes no engineer's text
  EXPECT_GE(whole->divergence.margin, 0);
  // The last 12 tokens the model's own, written greedily one by one: the model follows every one.
  const int tail = 12, n = t.token_ids_size();
  for (int k = 0; k < n; ++k) t.set_loss_mask(k, k >= n - tail ? 1 : 0);
  for (int k = n - tail; k < n; ++k) {
    const std::vector<int64_t> prefix(t.token_ids().begin(), t.token_ids().begin() + k);
    const at::Tensor logits = p.model->Logits(torch::tensor(prefix, torch::kInt64).unsqueeze(0)).squeeze(0)[-1];
    t.set_token_ids(k, static_cast<int32_t>(logits.argmax().item<int64_t>()));
  }
  auto greedy = ProbeTrajectory(*p.model, *p.tokenizer, t);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_EQ(greedy->divergence.token, -1);
  EXPECT_EQ(greedy->divergence.model_tokens, tail);
  // One of them changed: the rollout parts from the model there, the model preferring its own.
  const int changed = n - tail / 2;
  const int32_t was = t.token_ids(changed);
  t.set_token_ids(changed, was == 0 ? 1 : was - 1);
  auto parted = ProbeTrajectory(*p.model, *p.tokenizer, t);
  ASSERT_TRUE(parted.ok()) << parted.status();
  EXPECT_EQ(parted->divergence.token, changed);
  EXPECT_EQ(parted->divergence.model_token, tail / 2);
  EXPECT_EQ(parted->divergence.predicted, p.tokenizer->Decode({was}));
  EXPECT_EQ(parted->divergence.written, p.tokenizer->Decode({t.token_ids(changed)}));
  EXPECT_GT(parted->divergence.margin, 0);
  // Text without a task's header is refused, named.
  v1::Trajectory bare;
  bare.set_id("bare");
  for (int k = 0; k < 4; ++k) {
    bare.add_token_ids(k);
    bare.add_loss_mask(1);
  }
  auto refused = ProbeTrajectory(*p.model, *p.tokenizer, bare);
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StartsWith(refused.status().message(), "bare: ")) << refused.status();
}

// With stop_at_reward every reply after a Profile says what it paid and what it does next: each
// is probed (a random model gets some of them right, never more than there are).
TEST(OpProbeTest, EveryReplyAfterAProfileIsProbedForTheVerdictItAnswers) {
  agent::EngineerPolicyOptions eo;
  eo.device = "cuda";
  eo.stop_at_reward = 3;
  ProbedEpisodes p = ProbeEngineerEpisodes(eo, 2);
  OpProbeResult& result = p.result;
  int64_t replies = 0;  // Every episode's first Profile gets one.
  for (const Json& r : p.records) {
    for (const Json& m : *FindJson(r, "messages")) {
      if (m["role"].get<std::string>() == "assistant" && absl::StartsWith(m["content"].get<std::string>(), "Reward ")) {
        ++replies;
      }
    }
  }
  EXPECT_GE(replies, 6);
  for (const char* place : {"verdict_reward", "verdict_figures", "verdict_decision"}) {
    EXPECT_EQ(result.by_place[place].total, replies) << place;
    EXPECT_LE(result.by_place[place].right, replies) << place;
  }
  // The verdict's places are no op's: the compositions count only the places that name one.
  int64_t op_places = 0, compositions_total = 0;
  for (const auto& [k, c] : result.by_place) op_places += absl::StartsWith(k, "verdict_") ? 0 : c.total;
  for (const auto& [k, c] : result.by_composition) compositions_total += c.total;
  EXPECT_EQ(compositions_total, op_places);
}

}  // namespace
}  // namespace kernelrl::codemodel
