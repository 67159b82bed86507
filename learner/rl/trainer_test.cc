#include "learner/rl/trainer.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "gtest/gtest.h"
#include "learner/test_util.h"

namespace kernelrl::learner::rl {
namespace {

ModelConfig TinyConfig(int64_t vocab = 16) {
  return learner::testing::TinyQwen2Config(vocab);
}

std::unique_ptr<Transformer> Tiny(Head head, uint64_t seed, bool checkpointing = false) {
  ModelOptions o;
  o.trainable = true;
  o.activation_checkpointing = checkpointing;
  auto m = Transformer::Create(TinyConfig(), head, o, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

at::Tensor F(std::vector<float> v) { return at::tensor(v, at::kFloat); }

// Four model tokens of two trajectories (2 + 2), N = 2: every weight 1/4.
TEST(PpoLossTest, ClippedSurrogateAgainstRolloutByHand) {
  at::Tensor logp = F({-1.0f, -0.5f, -2.0f, -1.0f}).requires_grad_(true);
  at::Tensor rollout = F({-1.2f, -0.9f, -1.5f, -1.1f});
  at::Tensor adv = F({1.0f, 2.0f, -1.0f, -1.0f});
  at::Tensor w = F({0.25f, 0.25f, 0.25f, 0.25f});
  PolicyLoss pl = PpoPolicyLoss({logp, rollout, adv, w}, {0.2, 0.28, /*tis_threshold=*/0.0});
  // ratios: e^0.2 = 1.2214 (inside), e^0.4 = 1.4918 (> 1.28, A > 0: clipped
  // to 1.28), e^-0.5 = 0.6065 (< 0.8, A < 0: clipped to 0.8), e^0.1 = 1.1052
  // (A < 0, the unclipped term is the smaller: kept).
  const double r0 = std::exp(0.2), r3 = std::exp(0.1);
  const double expected = -0.25 * (r0 * 1.0 + 1.28 * 2.0 + 0.8 * -1.0 + r3 * -1.0);
  EXPECT_NEAR(pl.loss.item<double>(), expected, 1e-5);
  pl.loss.backward();
  // d/dlogp of -w * ratio * A = -w * A * ratio where the ratio term is active, 0 where clipped.
  at::Tensor g = logp.grad();
  EXPECT_NEAR(g[0].item<double>(), -0.25 * 1.0 * r0, 1e-5);
  EXPECT_EQ(g[1].item<double>(), 0.0);
  EXPECT_EQ(g[2].item<double>(), 0.0);
  EXPECT_NEAR(g[3].item<double>(), -0.25 * -1.0 * r3, 1e-5);
  EXPECT_NEAR(pl.stats.clipped, 0.5, 1e-6);
  EXPECT_NEAR(pl.stats.is_weight, 0.25 * (r0 + std::exp(0.4) + std::exp(-0.5) + r3), 1e-5);
  EXPECT_NEAR(pl.stats.is_weight_max, std::exp(0.4), 1e-5);
  EXPECT_NEAR(pl.stats.is_weight_min, std::exp(-0.5), 1e-5);
  EXPECT_NEAR(pl.stats.abs_logp_diff, 0.25 * (0.2 + 0.4 + 0.5 + 0.1), 1e-5);
}

TEST(PpoLossTest, TruncatedImportanceSamplingByHand) {
  // Trajectory A: 1 token, trajectory B: 2 tokens, N = 2: weights 1/2, 1/4, 1/4.
  at::Tensor logp = F({-0.1f, -2.0f, -0.7f}).requires_grad_(true);
  at::Tensor rollout = F({-1.0f, -1.6f, -0.7f});
  at::Tensor adv = F({0.5f, -2.0f, 3.0f});
  at::Tensor w = F({0.5f, 0.25f, 0.25f});
  PolicyLoss pl = PpoPolicyLoss({logp, rollout, adv, w}, {0.2, 0.28, /*tis_threshold=*/2.0});
  // The ratio is 1 (old = the trainer's own log-probs): loss = -sum w c A,
  // c = min(exp(logp - rollout), 2): e^0.9 = 2.46 -> 2; e^-0.4 = 0.670; 1.
  const double c1 = std::exp(-0.4);
  EXPECT_NEAR(pl.loss.item<double>(), -(0.5 * 2.0 * 0.5 + 0.25 * c1 * -2.0 + 0.25 * 1.0 * 3.0), 1e-5);
  pl.loss.backward();
  at::Tensor g = logp.grad();  // d ratio / d logp = 1; c is a constant.
  EXPECT_NEAR(g[0].item<double>(), -0.5 * 2.0 * 0.5, 1e-5);
  EXPECT_NEAR(g[1].item<double>(), -0.25 * c1 * -2.0, 1e-5);
  EXPECT_NEAR(g[2].item<double>(), -0.25 * 3.0, 1e-5);
  EXPECT_NEAR(pl.stats.truncated, 0.5, 1e-6);
  EXPECT_EQ(pl.stats.clipped, 0.0);
  // k3 KL: sum w (e^-d - 1 + d), d = logp - rollout.
  auto k3 = [](double d) { return std::exp(-d) - 1 + d; };
  EXPECT_NEAR(pl.stats.kl, 0.5 * k3(0.9) + 0.25 * k3(-0.4) + 0.25 * k3(0.0), 1e-5);
}

TEST(PpoLossTest, ValueAndSftLossesByHand) {
  at::Tensor v = F({1.0f, 2.0f, -1.0f}).requires_grad_(true);
  at::Tensor ret = F({3.0f, 2.5f, 0.0f});
  at::Tensor w = F({0.5f, 0.25f, 0.25f});
  at::Tensor vl = ValueLoss(v, ret, w);
  EXPECT_NEAR(vl.item<double>(), 0.5 * (0.5 * 4 + 0.25 * 0.25 + 0.25 * 1), 1e-6);
  vl.backward();
  EXPECT_NEAR(v.grad()[0].item<double>(), 0.5 * -2.0, 1e-6);  // w (v - ret)
  EXPECT_NEAR(v.grad()[1].item<double>(), 0.25 * -0.5, 1e-6);
  EXPECT_NEAR(v.grad()[2].item<double>(), 0.25 * -1.0, 1e-6);
  at::Tensor lp = F({-0.5f, -2.0f, -1.0f}).requires_grad_(true);
  at::Tensor sl = SftLoss(lp, w);
  EXPECT_NEAR(sl.item<double>(), 0.5 * 0.5 + 0.25 * 2 + 0.25 * 1, 1e-6);
  sl.backward();
  EXPECT_NEAR(lp.grad()[0].item<double>(), -0.5, 1e-6);
}

TEST(PackingTest, PackedRowEqualsSequencesAlone) {
  auto m = Tiny(Head::kLanguageModel, 7);
  at::manual_seed(3);
  at::Tensor a = at::randint(16, {1, 5}, at::kLong), b = at::randint(16, {1, 7}, at::kLong);
  at::NoGradGuard no_grad;
  at::Tensor packed = m->Hidden(at::cat({a, b}, 1), {5, 7});
  EXPECT_TRUE(at::allclose(packed.narrow(1, 0, 5), m->Hidden(a), 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(packed.narrow(1, 5, 7), m->Hidden(b), 1e-5, 1e-5));
  // Unpacked, b would attend to a and start at position 5.
  EXPECT_FALSE(at::allclose(m->Hidden(at::cat({a, b}, 1)).narrow(1, 5, 7), m->Hidden(b), 1e-3, 1e-3));
}

TEST(EntropyTest, ChunkedEntropyEqualsFullSoftmax) {
  auto m = Tiny(Head::kLanguageModel, 9);
  at::manual_seed(4);
  at::Tensor h = m->Hidden(at::randint(16, {1, 9}, at::kLong))[0].detach();
  at::Tensor logp = at::log_softmax(m->HeadLogits(h) / 0.7, -1);
  at::Tensor expected = -(logp.exp() * logp).sum(-1);
  EXPECT_TRUE(at::allclose(m->TokenEntropy(h, 0.7), expected, 1e-5, 1e-5));
}

// Reference SFT loss from the full logits, over the positions `mask` selects.
at::Tensor ReferenceNll(const Transformer& m, const Sample& s, const std::vector<uint8_t>& mask) {
  at::Tensor ids = at::tensor(std::vector<int64_t>(s.ids.begin(), s.ids.end()), at::kLong).unsqueeze(0);
  at::Tensor logp = at::log_softmax(m.Logits(ids)[0], -1);  // [T,V]
  at::Tensor sum = at::zeros({});
  int n = 0;
  for (size_t p = 1; p < s.ids.size(); ++p) {
    if (!mask[p]) continue;
    sum = sum - logp[p - 1][s.ids[p]];
    ++n;
  }
  return sum / n;
}

Sample RandomSample(const std::string& id, std::vector<uint8_t> mask, uint64_t seed) {
  at::manual_seed(seed);
  Sample s;
  s.id = id;
  at::Tensor ids = at::randint(16, {static_cast<int64_t>(mask.size())}, at::kLong);
  for (int64_t i = 0; i < ids.numel(); ++i) s.ids.push_back(static_cast<int32_t>(ids[i].item<int64_t>()));
  s.loss_mask = mask;
  at::Tensor lp = -at::rand({static_cast<int64_t>(mask.size())}) * 3;
  for (size_t i = 0; i < mask.size(); ++i) s.rollout_logprobs.push_back(mask[i] ? lp[i].item<float>() : 0.0f);
  s.reward = 1.0 + static_cast<double>(seed % 3);
  return s;
}

double GradNorm(const Transformer& m) {
  double sq = 0;
  for (const at::Tensor& p : m.parameters()) {
    if (p.grad().defined()) sq += p.grad().square().sum().item<double>();
  }
  return std::sqrt(sq);
}

// A conversation: [system + user template] assistant body [im_end, \n] tool
// response [template] assistant body: only the bodies are model tokens.
const std::vector<uint8_t> kMaskA = {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1};
const std::vector<uint8_t> kMaskB = {0, 0, 1, 1, 0, 0, 0, 1};

TEST(TrainerTest, SftTrainsOnlyModelTokensAndPackingDoesNotChangeTheLoss) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 11), RandomSample("b", kMaskB, 12)};
  auto ref_model = Tiny(Head::kLanguageModel, 5);
  at::Tensor ref = (ReferenceNll(*ref_model, batch[0], kMaskA) + ReferenceNll(*ref_model, batch[1], kMaskB)) / 2;
  ref.backward();
  const double ref_norm = GradNorm(*ref_model);
  std::vector<uint8_t> all(kMaskA.size(), 1);
  all[0] = 0;
  const double all_tokens = ReferenceNll(*ref_model, batch[0], all).item<double>();

  for (int64_t row_tokens : {int64_t{4}, int64_t{1024}}) {  // One row per trajectory; both in one row.
    TrainerOptions o;
    o.max_tokens_per_row = row_tokens;
    o.actor.max_grad_norm = 0;
    Trainer t(Tiny(Head::kLanguageModel, 5), nullptr, o);
    auto m = t.SftStep(batch);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)["rows"], row_tokens == 4 ? 2 : 1);
    EXPECT_NEAR((*m)["sft_loss"], ref.item<double>(), 1e-5);
    EXPECT_NEAR((*m)["actor_grad_norm"], ref_norm, 1e-4 * ref_norm);
    EXPECT_EQ((*m)["model_tokens"], 5 + 3);
    EXPECT_GT(std::abs(all_tokens - ReferenceNll(*ref_model, batch[0], kMaskA).item<double>()), 1e-3);
  }
}

TEST(TrainerTest, PpoIgnoresTheRolloutLogprobsOfNonModelTokens) {
  TrainerOptions o;
  o.policy_loss.tis_threshold = 0;
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 21), RandomSample("b", kMaskB, 22)};
  std::vector<Sample> noisy = batch;
  for (Sample& s : noisy) {
    for (size_t i = 0; i < s.ids.size(); ++i) {
      if (!s.loss_mask[i]) s.rollout_logprobs[i] = -50.0f - i;
    }
  }
  StepMetrics first, second;
  for (auto* b : {&batch, &noisy}) {
    Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
    auto m = t.PpoStep(*b);
    ASSERT_TRUE(m.ok()) << m.status();
    (b == &batch ? first : second) = *m;
  }
  for (const char* k : {"policy_loss", "value_loss", "actor_grad_norm", "critic_grad_norm", "logp_abs_diff"}) {
    EXPECT_DOUBLE_EQ(first[k], second[k]) << k;
  }
  EXPECT_GT(first["actor_grad_norm"], 0);
  EXPECT_GT(first["critic_grad_norm"], 0);
}

// With gamma = lambda = 1 every model token's advantage is R - V(s): a reward
// shift moves all of them by the same constant. Normalised advantages do not
// see it (the same actor update); raw ones do.
TEST(TrainerTest, NormalizedAdvantagesIgnoreARewardShift) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 31), RandomSample("b", kMaskB, 32)};
  batch[0].reward = 1.0, batch[1].reward = -1.0;
  std::vector<Sample> shifted = batch;
  for (Sample& s : shifted) s.reward += 2.0;
  for (bool normalize : {true, false}) {
    TrainerOptions o;
    o.gamma = 1.0, o.lambda = 1.0;
    o.normalize_advantages = normalize;
    o.actor.max_grad_norm = 0;
    std::vector<StepMetrics> m;
    for (auto* b : {&batch, &shifted}) {
      Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
      auto r = t.PpoStep(*b);
      ASSERT_TRUE(r.ok()) << r.status();
      m.push_back(*r);
    }
    if (normalize) {
      EXPECT_NEAR(m[0]["policy_loss"], m[1]["policy_loss"], 1e-6);
      EXPECT_NEAR(m[0]["actor_grad_norm"], m[1]["actor_grad_norm"], 1e-6 * m[0]["actor_grad_norm"]);
      EXPECT_NEAR(m[0]["advantage_mean"], m[1]["advantage_mean"], 1e-6);
      EXPECT_NEAR(m[1]["advantage_raw_mean"] - m[0]["advantage_raw_mean"], 2.0, 1e-5);
      EXPECT_GT(m[0]["advantage_raw_std"], 0.5);  // Rewards +1 and -1 differ.
    } else {
      EXPECT_GT(std::abs(m[0]["policy_loss"] - m[1]["policy_loss"]), 0.5);
      EXPECT_EQ(m[0].count("advantage_raw_mean"), 0u);
    }
  }
}

// A sample's baseline is subtracted from its reward before GAE: the update
// equals the one on reward - baseline; the reported rewards stay raw.
TEST(TrainerTest, ABaselineTrainsLikeTheCentredReward) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 31), RandomSample("b", kMaskB, 32)};
  batch[0].reward = 3.0, batch[1].reward = 0.5;
  std::vector<Sample> with_baseline = batch, centred = batch;
  with_baseline[0].baseline = 2.5, with_baseline[1].baseline = 1.0;
  centred[0].reward = 0.5, centred[1].reward = -0.5;
  TrainerOptions o;
  o.actor.max_grad_norm = 0, o.critic.max_grad_norm = 0;
  std::vector<StepMetrics> m;
  for (auto* b : {&batch, &with_baseline, &centred}) {
    Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
    auto r = t.PpoStep(*b);
    ASSERT_TRUE(r.ok()) << r.status();
    m.push_back(*r);
  }
  for (const char* k : {"policy_loss", "value_loss", "actor_grad_norm", "critic_grad_norm", "advantage_mean",
                        "explained_variance"}) {
    EXPECT_NEAR(m[1][k], m[2][k], 1e-6 * (1 + std::abs(m[2][k]))) << k;
  }
  EXPECT_GT(std::abs(m[0]["policy_loss"] - m[1]["policy_loss"]), 0.1);  // The baseline changed the update.
  EXPECT_DOUBLE_EQ(m[1]["reward_mean"], m[0]["reward_mean"]);
  EXPECT_DOUBLE_EQ(m[1]["reward_mean"], 1.75);
}

// PpoConfig.entropy_coef: from a policy made peaked by SFT, the bonus raises the entropy on the
// batch's model tokens against the same PPO steps without it.
TEST(TrainerTest, EntropyBonusRaisesTheEntropy) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 41), RandomSample("b", kMaskB, 42)};
  std::vector<double> last;
  for (double coef : {0.0, 0.5}) {
    TrainerOptions o;
    o.actor.lr = 1e-2;
    o.entropy_coef = coef;
    Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
    for (int i = 0; i < 15; ++i) ASSERT_TRUE(t.SftStep(batch).ok());  // A peaked policy: room to rise.
    StepMetrics m;
    for (int i = 0; i < 6; ++i) {
      auto r = t.PpoStep(batch);
      ASSERT_TRUE(r.ok()) << r.status();
      m = *r;
    }
    ASSERT_TRUE(m.count("entropy"));
    last.push_back(m["entropy"]);
  }
  EXPECT_GT(last[1], last[0] + 0.05) << "entropy without the bonus " << last[0] << ", with " << last[1];
  std::printf("entropy after SFT + 6 PPO steps: %.3f without the bonus, %.3f with\n", last[0], last[1]);
}

TEST(TrainerTest, ActivationCheckpointingGivesTheSameStep) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 31), RandomSample("b", kMaskB, 32)};
  StepMetrics m[2];
  for (int c = 0; c < 2; ++c) {
    Trainer t(Tiny(Head::kLanguageModel, 5, c == 1), Tiny(Head::kValue, 6, c == 1), {});
    auto r = t.PpoStep(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    m[c] = *r;
  }
  EXPECT_NEAR(m[0]["actor_grad_norm"], m[1]["actor_grad_norm"], 1e-5 * m[0]["actor_grad_norm"]);
  EXPECT_NEAR(m[0]["critic_grad_norm"], m[1]["critic_grad_norm"], 1e-5 * m[0]["critic_grad_norm"]);
}

TEST(TrainerTest, OptimizerStateRoundTrips) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 41)};
  Trainer a(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), {});
  ASSERT_TRUE(a.PpoStep(batch).ok());
  Trainer b(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), {});
  ASSERT_TRUE(b.PpoStep(batch).ok());
  ASSERT_TRUE(b.actor_optimizer().LoadState(a.actor_optimizer().State("actor/"), "actor/").ok());
  auto state = b.actor_optimizer().State("actor/");
  for (const auto& [k, v] : a.actor_optimizer().State("actor/")) EXPECT_TRUE(at::equal(v, state.at(k))) << k;
  auto missing = a.actor_optimizer().State("actor/");
  missing.erase("actor/0/exp_avg");
  EXPECT_EQ(b.actor_optimizer().LoadState(missing, "actor/").code(), absl::StatusCode::kDataLoss);
}

// The toy task: prompt [BOS, a], the policy answers one token, then the
// template closes the turn (a token with mask 0). Reward +1 if the answer
// is a, else -1: a uniform policy earns -0.875.
struct ToyRollouts {
  std::vector<Sample> batch;
  double reward_mean = 0;
};

ToyRollouts Rollouts(Transformer& policy, int n, uint64_t seed) {
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor a = at::randint(4, 12, {n}, gen, at::kLong);
  at::Tensor prompt = at::stack({at::ones({n}, at::kLong), a}, 1);  // [n,2]
  at::Tensor logp = at::log_softmax(policy.Logits(prompt).select(1, 1), -1);  // [n,V]
  at::Tensor y = at::multinomial(logp.exp(), 1, false, gen).squeeze(1);
  ToyRollouts out;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.id = std::to_string(seed) + "/" + std::to_string(i);
    const int32_t ai = static_cast<int32_t>(a[i].item<int64_t>()), yi = static_cast<int32_t>(y[i].item<int64_t>());
    s.ids = {1, ai, yi, 2};
    s.loss_mask = {0, 0, 1, 0};
    s.rollout_logprobs = {0, 0, logp[i][yi].item<float>(), 0};
    s.reward = yi == ai ? 1.0 : -1.0;
    out.reward_mean += s.reward / n;
    out.batch.push_back(std::move(s));
  }
  return out;
}

TEST(TrainerTest, TinyModelLearnsToyTaskWithPpo) {
  at::manual_seed(0);
  TrainerOptions o;
  o.actor.lr = 3e-3;
  o.critic.lr = 3e-3;
  Trainer t(Tiny(Head::kLanguageModel, 1), Tiny(Head::kValue, 2), o);
  const double start = Rollouts(t.policy(), 256, 1000).reward_mean;
  for (int step = 0; step < 120; ++step) {
    ToyRollouts r = Rollouts(t.policy(), 32, step);
    auto m = t.PpoStep(r.batch);
    ASSERT_TRUE(m.ok()) << m.status();
  }
  const double end = Rollouts(t.policy(), 256, 2000).reward_mean;
  std::printf("toy task: reward %.3f -> %.3f\n", start, end);
  EXPECT_LT(start, -0.6);
  EXPECT_GT(end, start + 1.0);  // Well above the start: at least half the answers right.
}

}  // namespace
}  // namespace kernelrl::learner::rl
