// What the critic is for, on a tiny model (CPU): it must learn the return
// (a) when the prompt decides the reward, on fresh batches, even with the
// per-task baselines set on the batch; (b) when the reply decides it, from
// the state after the reply; (c) at the first token of a 2,000-token
// trajectory, which only Monte-Carlo targets (lambda_critic = 1) reach.
#include <ATen/CPUGeneratorImpl.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"
#include "learner/rl/gae.h"
#include "learner/rl/trainer.h"
#include "learner/test_util.h"

namespace kernelrl::learner::rl {
namespace {

constexpr int64_t kVocab = 16;

std::unique_ptr<Transformer> Tiny(Head head, uint64_t seed) {
  ModelOptions o;
  o.trainable = true;
  auto m = Transformer::Create(learner::testing::TinyQwen2Config(kVocab), head, o, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

std::unique_ptr<Trainer> CriticTrainer(double lambda_critic, double lr, double head_lr_scale = 1) {
  at::set_num_threads(1);  // Tiny matrices: threads only contend on a loaded machine.
  TrainerOptions o;
  o.max_tokens_per_row = 2048;  // One long trajectory per row.
  o.lambda_critic = lambda_critic;
  o.critic.lr = lr;
  o.critic.weight_decay = 0;
  o.critic.head_lr_scale = head_lr_scale;
  return std::make_unique<Trainer>(Tiny(Head::kLanguageModel, 1), Tiny(Head::kValue, 2), o);
}

// A trajectory: `prefix` (no model tokens), then n_model model tokens drawn from gen.
Sample Trajectory(const std::string& id, const std::string& task, std::vector<int32_t> prefix, int n_model,
                  double reward, at::Generator& gen) {
  Sample s;
  s.id = id;
  s.task_id = task;
  s.ids = std::move(prefix);
  s.loss_mask.assign(s.ids.size(), 0);
  at::Tensor body = at::randint(0, kVocab, {n_model}, gen, at::kLong);
  for (int i = 0; i < n_model; ++i) s.ids.push_back(static_cast<int32_t>(body[i].item<int64_t>()));
  s.loss_mask.resize(s.ids.size(), 1);
  s.rollout_logprobs.assign(s.ids.size(), 0.0f);
  for (size_t i = 0; i < s.ids.size(); ++i) {
    if (s.loss_mask[i]) s.rollout_logprobs[i] = -std::log(static_cast<float>(kVocab));
  }
  s.reward = reward;
  return s;
}

// Explained variance of the critic's values against the Monte-Carlo return
// (the raw reward: gamma 1, outcome reward) over the model tokens from index
// `from` of each trajectory.
double EvAgainstReward(Trainer& t, const std::vector<Sample>& batch, size_t from) {
  auto values = t.CriticValues(batch);
  EXPECT_TRUE(values.ok()) << values.status();
  std::vector<float> v, r;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t k = from; k < (*values)[i].size(); ++k) {
      v.push_back((*values)[i][k]);
      r.push_back(static_cast<float>(batch[i].reward));
    }
  }
  return ExplainedVariance(v, r);
}

// (a) Eight tasks, each with its own reward; the rollouts' tokens are noise.
// The batches carry the leave-one-out task baselines (as a job with
// task_baseline sets them): the critic still learns the raw return.
std::vector<Sample> PromptBatch(int n, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor task = at::randint(0, 8, {n}, gen, at::kLong);
  std::vector<Sample> batch;
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>(task[i].item<int64_t>());
    batch.push_back(Trajectory(std::to_string(seed) + "/" + std::to_string(i), "task" + std::to_string(k),
                               {1, 4 + k, 2}, 6, -1.0 + 2.0 * k / 7.0, gen));
  }
  SetTaskBaselines(&batch);
  return batch;
}

TEST(CriticTest, PromptDeterminedRewardIsExplainedOnFreshBatches) {
  auto t = CriticTrainer(1.0, 3e-3);
  double first_ev = 0;
  for (int step = 0; step < 100; ++step) {
    auto m = t->ValueStep(PromptBatch(16, 100 + step));
    ASSERT_TRUE(m.ok()) << m.status();
    if (step == 0) first_ev = (*m)["explained_variance"];
    // The sums behind the figure travel with it (a reader pools them over updates).
    const double n = (*m)["ev_tokens"], mr = (*m)["ev_target_sum"] / n, md = (*m)["ev_residual_sum"] / n;
    ASSERT_GT(n, 0);
    EXPECT_NEAR(1 - ((*m)["ev_residual_sq_sum"] / n - md * md) / ((*m)["ev_target_sq_sum"] / n - mr * mr),
                (*m)["explained_variance"], 1e-6);
  }
  const std::vector<Sample> fresh = PromptBatch(64, 9999);
  const double ev = EvAgainstReward(*t, fresh, 0);
  std::printf("prompt-determined reward: explained variance %.3f at the first step, %.3f on a fresh batch\n",
              first_ev, ev);
  EXPECT_GT(ev, 0.9);
}

// (b) One prompt; the reply's first token decides the reward (+1 for an even
// token, -1 for odd). Before the reply nothing predicts it; after it, all.
std::vector<Sample> ReplyBatch(int n, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<Sample> batch;
  for (int i = 0; i < n; ++i) {
    Sample s = Trajectory(std::to_string(seed) + "/" + std::to_string(i), "t", {1, 2}, 4, 0, gen);
    s.reward = s.ids[2] % 2 == 0 ? 1.0 : -1.0;
    batch.push_back(std::move(s));
  }
  return batch;
}

TEST(CriticTest, ReplyDeterminedRewardIsExplainedAfterTheReply) {
  auto t = CriticTrainer(1.0, 3e-3);
  for (int step = 0; step < 100; ++step) ASSERT_TRUE(t->ValueStep(ReplyBatch(16, 200 + step)).ok());
  const std::vector<Sample> fresh = ReplyBatch(64, 8888);
  const double post = EvAgainstReward(*t, fresh, 1);  // Model token 0's state precedes the reply.
  std::printf("reply-determined reward: explained variance %.3f at the post-reply states\n", post);
  EXPECT_GT(post, 0.8);
}

// (c) 2,000 tokens: the prompt's task token decides the reward (+1 / -1);
// the prompt ends in the token the 2,000 model tokens repeat (only the task
// token tells the trajectories apart), so the first model token's state is
// like every later one. With lambda_critic = 1 every token's target is the
// reward, and the first token's value learns it; with 0.95 its target holds
// 0.95^1999 of the reward, the rest is the critic's own guesses, and it stays
// at the mean return.
std::vector<Sample> LongBatch(uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<Sample> batch;
  for (int i = 0; i < 2; ++i) {
    const bool good = i % 2 == 0;
    batch.push_back(Trajectory(std::to_string(seed) + "/" + std::to_string(i), good ? "good" : "bad",
                               {1, good ? 4 : 5, 3}, 2000, good ? 1.0 : -1.0, gen));
    std::fill(batch.back().ids.begin() + 3, batch.back().ids.end(), 3);
  }
  return batch;
}

TEST(CriticTest, FirstTokenOfALongTrajectoryLearnsTheReturnOnlyWithMonteCarloTargets) {
  constexpr int kFirstTurn = 100;
  std::vector<double> error, turn_error;  // Mean |value - return| per lambda.
  for (double lambda : {1.0, 0.95}) {
    auto t = CriticTrainer(lambda, 3e-3, /*head_lr_scale=*/10);  // The job default scale.
    for (int step = 0; step < 70; ++step) {
      auto m = t->ValueStep(LongBatch(300 + step));
      ASSERT_TRUE(m.ok()) << m.status();
      if (step % 10 == 9) std::printf("  lambda_critic %.2f step %d: value loss %.4f\n", lambda, step + 1, (*m)["value_loss"]);
    }
    const std::vector<Sample> fresh = LongBatch(7777);
    auto values = t->CriticValues(fresh);
    ASSERT_TRUE(values.ok()) << values.status();
    double e = 0, e_turn = 0;
    std::vector<double> turn(fresh.size());
    for (size_t i = 0; i < fresh.size(); ++i) {
      ASSERT_EQ((*values)[i].size(), 2000u);
      for (int k = 0; k < kFirstTurn; ++k) turn[i] += (*values)[i][k] / kFirstTurn;
      e += std::abs((*values)[i][0] - fresh[i].reward) / fresh.size();
      e_turn += std::abs(turn[i] - fresh[i].reward) / fresh.size();
    }
    std::printf("2,000-token trajectory, lambda_critic %.2f: first turn's mean value %+.3f / %+.3f, first token's "
                "%+.3f / %+.3f (return +1 / -1)\n",
                lambda, turn[0], turn[1], (*values)[0][0], (*values)[1][0]);
    error.push_back(e), turn_error.push_back(e_turn);
  }
  // Learned with Monte-Carlo targets: the first token's value (+0.88 / -0.79
  // when written) and the first turn's (the first 100 tokens).
  EXPECT_LT(error[0], 0.3);
  EXPECT_LT(turn_error[0], 0.2);
  // Not with lambda 0.95: both stay near the mean return, 0.
  EXPECT_GT(error[1], 0.8);
  EXPECT_GT(turn_error[1], 0.8);
}

}  // namespace
}  // namespace kernelrl::learner::rl
