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
  at::Tensor seq = at::tensor(std::vector<int64_t>{0, 0, 1, 1}, at::kLong);
  PolicyLoss pl = PpoPolicyLoss({logp, rollout, adv, w, seq}, {0.2, 0.28});
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

// Dual-clip and the mismatch mask, by hand. Trajectory A: tokens 0-1,
// trajectory B: tokens 2-3; weights 1/4.
TEST(PpoLossTest, DualClipAndMismatchMaskByHand) {
  at::Tensor rollout = F({-1.0f, -1.0f, -1.0f, -1.0f});
  at::Tensor adv = F({-2.0f, 1.0f, -1.0f, 1.0f});
  at::Tensor w = F({0.25f, 0.25f, 0.25f, 0.25f});
  at::Tensor seq = at::tensor(std::vector<int64_t>{0, 0, 1, 1}, at::kLong);
  // log-ratios: 1.5 (r = 4.48 > dual_clip 3, A < 0), 0.1, -0.1, 0.1.
  const std::vector<float> lp = {0.5f, -0.9f, -1.1f, -0.9f};
  {  // No mask: token 0 is held at dual_clip * A = -6 (no gradient); the rest as the plain clip says.
    PolicyLossParams p{0.2, 0.28, 3.0, MismatchMask::kOff};
    at::Tensor logp = F(lp).requires_grad_(true);
    PolicyLoss pl = PpoPolicyLoss({logp, rollout, adv, w, seq}, p);
    const double r1 = std::exp(0.1), r2 = std::exp(-0.1);
    EXPECT_NEAR(pl.loss.item<double>(), -0.25 * (3.0 * -2.0 + r1 * 1.0 + r2 * -1.0 + r1 * 1.0), 1e-5);
    pl.loss.backward();
    EXPECT_EQ(logp.grad()[0].item<double>(), 0.0);
    EXPECT_NEAR(pl.stats.dual_clipped, 0.25, 1e-6);
    EXPECT_EQ(pl.stats.masked, 0.0);
    // Without dual-clip the same token's loss grows with the ratio: 2 x 4.48 instead of 2 x 3.
    PolicyLoss open = PpoPolicyLoss({F(lp), rollout, adv, w, seq}, {0.2, 0.28, 0.0, MismatchMask::kOff});
    EXPECT_NEAR(open.loss.item<double>() - pl.loss.item<double>(), 0.25 * 2.0 * (std::exp(1.5) - 3.0), 1e-4);
  }
  {  // Token mask [0.5, 2]: token 0 (ratio 4.48) is masked, no gradient, out of the loss.
    at::Tensor logp = F(lp).requires_grad_(true);
    PolicyLoss pl = PpoPolicyLoss({logp, rollout, adv, w, seq}, {0.2, 0.28, 3.0, MismatchMask::kToken, 0.5, 2.0});
    const double r1 = std::exp(0.1), r2 = std::exp(-0.1);
    EXPECT_NEAR(pl.loss.item<double>(), -0.25 * (r1 * 1.0 + r2 * -1.0 + r1 * 1.0), 1e-5);
    EXPECT_NEAR(pl.stats.masked, 0.25, 1e-6);
    EXPECT_EQ(pl.stats.dual_clipped, 0.0);  // Counted only where the token is trained.
    pl.loss.backward();
    EXPECT_EQ(logp.grad()[0].item<double>(), 0.0);
    EXPECT_NE(logp.grad()[1].item<double>(), 0.0);
  }
  {  // Sequence mask: A's geometric-mean log-ratio (1.5 + 0.1) / 2 = 0.8 > log 2: both its tokens go; B stays.
    PolicyLoss pl =
        PpoPolicyLoss({F(lp), rollout, adv, w, seq}, {0.2, 0.28, 3.0, MismatchMask::kSequence, 0.5, 2.0});
    EXPECT_NEAR(pl.stats.masked, 0.5, 1e-6);
    EXPECT_NEAR(pl.loss.item<double>(), -0.25 * (std::exp(-0.1) * -1.0 + std::exp(0.1) * 1.0), 1e-5);
  }
  // k3 KL: sum w (e^-d - 1 + d), d = logp - rollout.
  PolicyLoss pl = PpoPolicyLoss({F(lp), rollout, adv, w, seq}, {});
  auto k3 = [](double d) { return std::exp(-d) - 1 + d; };
  EXPECT_NEAR(pl.stats.kl, 0.25 * (k3(1.5) + k3(0.1) + k3(-0.1) + k3(0.1)), 1e-5);
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

// The KL pull: exp(d) - d - 1 and its gradient 1 - exp(d) per token where the policy is near the
// reference; a token past the bound adds the bound and no gradient.
TEST(PpoLossTest, KlRefPenaltyBoundsEachToken) {
  const int64_t n = 16;
  const at::Tensor ref = at::randn({n}, at::kDouble) - 3.0;
  at::Tensor d = at::rand({n}, at::kDouble) * 2.0 - 1.0;  // within 1 nat
  d[3] = 9.0;                                            // the policy 9 nats below the reference
  d[7] = -30.0;                                          // 30 above
  const at::Tensor w = at::rand({n}, at::kDouble) + 0.5;
  const at::Tensor logp = (ref - d).requires_grad_(true);
  const at::Tensor kl = KlRefPenalty(ref, logp, w);
  kl.backward();
  const at::Tensor k = at::exp(d) - d - 1;
  const at::Tensor grad = w * (1 - at::exp(d));
  double want = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool out = i == 3 || i == 7;
    want += w[i].item<double>() * (out ? kKlRefTokenBound : k[i].item<double>());
    EXPECT_NEAR(logp.grad()[i].item<double>(), out ? 0.0 : grad[i].item<double>(), 1e-9) << "token " << i;
  }
  EXPECT_NEAR(kl.item<double>(), want, 1e-9);
  EXPECT_GT(k[3].item<double>(), 8000.0);  // what the token would have added unbounded
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
    o.value_head_init = false;  // The head's bias would follow the shift (the batch's mean reward).
    o.policy_loss.mismatch_mask = MismatchMask::kOff;  // RandomSample's rollout log-probs are far off.
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

// The per-task baseline is an estimator of its own: every model token's
// advantage is reward - baseline (the update equals the one on the centred
// reward), while the critic trains on the raw reward. With the critic
// estimator a baseline is refused: the two are never stacked.
TEST(TrainerTest, TaskBaselineIsAnAlternativeToTheCritic) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 31), RandomSample("b", kMaskB, 32)};
  batch[0].reward = 3.0, batch[1].reward = 0.5;
  std::vector<Sample> with_baseline = batch, centred = batch;
  with_baseline[0].baseline = 2.5, with_baseline[1].baseline = 1.0;
  centred[0].reward = 0.5, centred[1].reward = -0.5;
  TrainerOptions o;
  o.actor.max_grad_norm = 0, o.critic.max_grad_norm = 0;
  {
    Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
    auto r = t.PpoStep(with_baseline);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  o.advantage = AdvantageEstimator::kTaskBaseline;
  std::vector<StepMetrics> m;
  for (auto* b : {&with_baseline, &centred}) {
    Trainer t(Tiny(Head::kLanguageModel, 5), nullptr, o);  // The baseline needs no critic.
    auto r = t.PpoStep(*b);
    ASSERT_TRUE(r.ok()) << r.status();
    m.push_back(*r);
  }
  for (const char* k : {"policy_loss", "actor_grad_norm", "advantage_mean"}) {
    EXPECT_NEAR(m[0][k], m[1][k], 1e-6 * (1 + std::abs(m[1][k]))) << k;
  }
  EXPECT_GT(m[0]["actor_grad_norm"], 0);
  EXPECT_EQ(m[0].count("value_loss"), 0u);
  EXPECT_DOUBLE_EQ(m[0]["reward_mean"], 1.75);  // Reported rewards stay raw.
  // With a critic alongside, it learns the raw return (its targets ignore the baseline).
  Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
  auto r = t.PpoStep(with_baseline);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR((*r)["policy_loss"], m[0]["policy_loss"], 1e-6);
  EXPECT_GT((*r)["value_loss"], 0);
  EXPECT_TRUE(r->count("explained_variance"));
  EXPECT_TRUE(r->count("explained_variance_gae95"));  // Beside it, against the paper's targets.
  EXPECT_FALSE(r->count("ev95_r"));                    // Helper sums are not reported.
}

// An off-policy batch (rollout log-probs far from the trainer's, as after
// several policy versions or an engine mismatch): the ratio is taken against
// the rollout, so the clip binds and the mismatch mask fires, and the update
// stays bounded: |policy loss| <= max(1 + clip_high, dual_clip) max |A|.
TEST(TrainerTest, OffPolicyBatchClipsMasksAndStaysBounded) {
  std::vector<Sample> batch;
  for (int i = 0; i < 8; ++i) {
    batch.push_back(RandomSample("s" + std::to_string(i), i % 2 ? kMaskA : kMaskB, 50 + i));
    batch.back().reward = i % 2 ? 1.0 : -1.0;
    // The tiny random policy gives about 1/16 to every token: the rollout's
    // log-probs are that, moved by up to +-1.5 (ratios e^-1.5 .. e^1.5).
    at::Tensor noise = at::rand({static_cast<int64_t>(batch.back().ids.size())}) * 3.0 - 1.5;
    for (size_t k = 0; k < batch.back().ids.size(); ++k) {
      if (batch.back().loss_mask[k]) batch.back().rollout_logprobs[k] = -std::log(16.0f) + noise[k].item<float>();
    }
  }
  TrainerOptions o;
  o.actor.lr = 1e-3;
  Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
  auto m = t.PpoStep(batch);
  ASSERT_TRUE(m.ok()) << m.status();
  std::printf("off-policy batch: clip %.3f, dual-clip %.3f, masked %.3f, IS weight %.3f..%.3f, policy loss %.4f\n",
              (*m)["clip_frac"], (*m)["dual_clip_frac"], (*m)["mask_frac"], (*m)["is_weight_min"],
              (*m)["is_weight_max"], (*m)["policy_loss"]);
  EXPECT_GT((*m)["clip_frac"], 0);
  EXPECT_GT((*m)["mask_frac"], 0);
  EXPECT_LT((*m)["mask_frac"], 1);
  EXPECT_GT((*m)["is_weight_max"], 2.0);  // Indeed off-policy.
  EXPECT_TRUE(std::isfinite((*m)["policy_loss"]));
  EXPECT_LE(std::abs((*m)["policy_loss"]), 3.0 * 1.1);  // |A| <= ~1: the critic starts near the mean reward.
  EXPECT_TRUE(std::isfinite((*m)["actor_grad_norm"]));
}

// A change of objective is a stage change: both optimizers restart (zero
// moments, their own warm-up); the same objective again keeps them.
TEST(TrainerTest, OptimizersResetWhenTheObjectiveChanges) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 61), RandomSample("b", kMaskB, 62)};
  TrainerOptions o;
  o.actor.warmup_steps = 4;
  Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.SftStep(batch).ok());
  EXPECT_EQ(t.actor_optimizer().steps(), 3);
  auto m = t.PpoStep(batch);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)["optimizer_reset"], 1);
  EXPECT_EQ(t.actor_optimizer().steps(), 1);
  EXPECT_NEAR((*m)["actor_lr"], o.actor.lr * 0.25, 1e-12);  // Warm-up step 1 of 4 again.
  m = t.PpoStep(batch);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->count("optimizer_reset"), 0u);
  EXPECT_EQ(t.actor_optimizer().steps(), 2);
  // The objective survives a checkpoint: a trainer restored from this state resets at a change too.
  Trainer u(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
  ASSERT_TRUE(u.LoadState(t.State()).ok());
  m = u.SftStep(batch);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)["optimizer_reset"], 1);
}

TEST(TrainerTest, PpoEpochsAndMinibatchesStepPerMinibatch) {
  std::vector<Sample> batch;
  for (int i = 0; i < 4; ++i) batch.push_back(RandomSample("s" + std::to_string(i), kMaskA, 70 + i));
  TrainerOptions o;
  o.epochs = 2, o.minibatches = 2;
  Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
  auto m = t.PpoStep(batch);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)["updates"], 4);
  EXPECT_EQ(t.actor_optimizer().steps(), 4);
  EXPECT_EQ(t.critic_optimizer()->steps(), 4);
  EXPECT_EQ((*m)["trajectories"], 4);  // The batch's figures, not four times them.
  EXPECT_EQ((*m)["model_tokens"], 4 * 5);
}

// critic_epochs beyond epochs: the critic takes its extra passes alone. The actor ends where a
// trainer with one pass leaves it; the critic fits the batch's returns closer.
TEST(TrainerTest, CriticEpochsTrainTheCriticAloneAfterTheActorsPasses) {
  std::vector<Sample> batch;
  for (int i = 0; i < 4; ++i) batch.push_back(RandomSample("s" + std::to_string(i), kMaskA, 90 + i));
  auto run = [&](int critic_epochs) {
    TrainerOptions o;
    o.epochs = 1, o.minibatches = 2, o.critic_epochs = critic_epochs;
    o.critic.lr = 1e-2;
    auto t = std::make_unique<Trainer>(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
    auto m = t->PpoStep(batch);
    EXPECT_TRUE(m.ok()) << m.status();
    return std::make_pair(std::move(t), *m);
  };
  auto [one, m1] = run(1);
  auto [four, m4] = run(4);
  EXPECT_EQ(m4["updates"], 2);
  EXPECT_EQ(m4["critic_only_updates"], 6);
  EXPECT_EQ(m1.count("critic_only_updates"), 0u);
  EXPECT_EQ(four->actor_optimizer().steps(), 2);
  EXPECT_EQ(four->critic_optimizer()->steps(), 8);
  EXPECT_EQ(m4.count("optimizer_reset"), 0u);  // One stage: the critic's moments carry over its passes.
  const std::vector<at::Tensor> a1 = one->policy().parameters(), a4 = four->policy().parameters();
  ASSERT_EQ(a1.size(), a4.size());
  for (size_t i = 0; i < a1.size(); ++i) EXPECT_TRUE(at::equal(a1[i], a4[i])) << "actor parameter " << i;
  // The critic after its extra passes: a value step's loss on the same batch is lower.
  auto v1 = one->ValueStep(batch), v4 = four->ValueStep(batch);
  ASSERT_TRUE(v1.ok() && v4.ok());
  EXPECT_LT((*v4)["value_loss"], (*v1)["value_loss"]);
}

// The critic's replay step (PpoConfig.critic_replay_batches) is a value update inside the PPO
// stage: neither it nor the next PPO update resets the optimizers, and the actor stays as it is.
TEST(TrainerTest, ACriticReplayStepStaysInThePpoStage) {
  std::vector<Sample> batch, earlier;
  for (int i = 0; i < 2; ++i) batch.push_back(RandomSample("s" + std::to_string(i), kMaskA, 120 + i));
  for (int i = 0; i < 3; ++i) earlier.push_back(RandomSample("e" + std::to_string(i), kMaskB, 130 + i));
  Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), TrainerOptions{});
  ASSERT_TRUE(t.PpoStep(batch).ok());
  const std::vector<at::Tensor> actor = t.policy().parameters();
  std::vector<at::Tensor> before;
  for (const at::Tensor& p : actor) before.push_back(p.detach().clone());
  std::vector<Sample> replay = earlier;
  replay.insert(replay.end(), batch.begin(), batch.end());
  auto r = t.CriticReplayStep(replay);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->count("optimizer_reset"), 0u);
  EXPECT_EQ(t.critic_optimizer()->steps(), 2);
  EXPECT_EQ(t.actor_optimizer().steps(), 1);
  for (size_t i = 0; i < actor.size(); ++i) EXPECT_TRUE(at::equal(actor[i], before[i])) << "actor parameter " << i;
  auto m = t.PpoStep(batch);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->count("optimizer_reset"), 0u);
  EXPECT_EQ(t.actor_optimizer().steps(), 2);
  // A value-pretraining step is another stage: it resets them.
  auto v = t.ValueStep(replay);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)["optimizer_reset"], 1);
}

// Token mean: every model token of the batch weighs the same, so a long
// trajectory outweighs a short one; the trajectory mean weighs them alike.
TEST(TrainerTest, TokenMeanAndTrajectoryMeanAggregation) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 81), RandomSample("b", kMaskB, 82)};
  std::vector<double> sft;
  for (LossAggregation agg : {LossAggregation::kTrajectoryMean, LossAggregation::kTokenMean}) {
    TrainerOptions o;
    o.aggregation = agg;
    Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
    auto m = t.PpoStep(batch);
    ASSERT_TRUE(m.ok()) << m.status();
    sft.push_back((*m)["policy_loss"]);
  }
  EXPECT_GT(std::abs(sft[0] - sft[1]), 1e-4);
}

TEST(AdamWTest, WarmupThenCosineScheduleAndDecayExclusions) {
  AdamWParams p;
  p.lr = 1.0, p.warmup_steps = 4, p.decay_steps = 4, p.min_lr_ratio = 0.1;
  at::Tensor x = at::zeros({2, 2}).requires_grad_(true);
  AdamW opt({x}, p);
  std::vector<double> f;
  for (int i = 0; i < 10; ++i) {
    f.push_back(opt.ScheduleFactor());
    opt.Step();
  }
  EXPECT_NEAR(f[0], 0.25, 1e-12);
  EXPECT_NEAR(f[3], 1.0, 1e-12);
  EXPECT_NEAR(f[5], 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-12);
  EXPECT_NEAR(f[7], 0.1, 1e-12);
  EXPECT_NEAR(f[9], 0.1, 1e-12);
  opt.Reset();
  EXPECT_NEAR(opt.ScheduleFactor(), 0.25, 1e-12);

  // No decay on the embedding, norms and the value head; matrices decay.
  // With no gradient AdamW's only move is the decay.
  TrainerOptions o;
  o.critic.lr = 0.1, o.critic.weight_decay = 0.5;
  Trainer t(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), o);
  std::vector<at::Tensor> before;
  for (const at::Tensor& w : t.critic()->parameters()) before.push_back(w.detach().clone());
  t.critic_optimizer()->Step();
  std::vector<at::Tensor> after = t.critic()->parameters();
  EXPECT_TRUE(at::equal(before[0], after[0].detach()));          // Embedding.
  EXPECT_TRUE(at::equal(before.back(), after.back().detach()));  // Value head bias.
  EXPECT_TRUE(at::equal(before[before.size() - 2], after[after.size() - 2].detach()));  // Value head weight.
  EXPECT_TRUE(at::equal(before[1], after[1].detach()));          // First layer's input norm.
  EXPECT_FALSE(at::equal(before[2], after[2].detach()));         // First layer's qkv matrix.
}

// The KL penalty's reference is the actor as the PPO stage found it. With no advantage to follow
// (baseline = reward), an actor moved off it comes back with the penalty on (in what it says: its
// weights go wherever that takes them) and stays where it is without; a checkpoint carries the
// reference, and a new stage takes a new one.
TEST(TrainerTest, KlReferencePullsTheActorBackAndTravelsInCheckpoints) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 51), RandomSample("b", kMaskB, 52)};
  for (Sample& s : batch) s.baseline = s.reward;  // Zero advantages: only the penalty moves the actor.
  auto weights = [](const Transformer& m) {
    std::vector<at::Tensor> w;
    for (const at::Tensor& p : m.parameters()) w.push_back(p.detach().clone());
    return w;
  };
  auto distance = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    double sq = 0;
    for (size_t i = 0; i < a.size(); ++i) sq += (a[i] - b[i]).square().sum().item<double>();
    return std::sqrt(sq);
  };
  for (double coef : {0.0, 1.0}) {
    TrainerOptions o;
    o.advantage = AdvantageEstimator::kTaskBaseline;
    o.actor.lr = 1e-2, o.actor.weight_decay = 0;
    o.kl_ref_coef = coef;
    Trainer t(Tiny(Head::kLanguageModel, 5), nullptr, o);
    auto first = t.PpoStep(batch);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(t.kl_reference() != nullptr, coef > 0);
    EXPECT_EQ(first->count("kl_ref_taken"), coef > 0 ? 1u : 0u);
    if (coef > 0) EXPECT_NEAR((*first)["kl_ref"], 0, 1e-9) << "the reference is the actor itself";
    const std::vector<at::Tensor> start = weights(t.policy());
    {
      at::NoGradGuard no_grad;
      for (at::Tensor& p : t.policy().parameters()) p.add_(at::randn_like(p) * 0.05);
    }
    t.actor_optimizer().SyncMasterFromParams();
    const double moved = distance(weights(t.policy()), start);
    std::vector<double> kl;
    for (int i = 0; i < 12; ++i) {
      auto m = t.PpoStep(batch);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(m->count("kl_ref_taken"), 0u);
      kl.push_back((*m)["kl_ref"]);
    }
    if (coef == 0) {
      EXPECT_NEAR(distance(weights(t.policy()), start), moved, 1e-6) << "nothing to follow, nothing pulls";
      continue;
    }
    EXPECT_GT(kl[0], 1e-4);
    EXPECT_LT(kl.back(), 0.5 * kl[0]) << "KL to the reference " << kl[0] << " -> " << kl.back();
    std::printf("KL to the reference after a 0.05 nudge: %.5f, 12 updates later %.5f\n", kl[0], kl.back());

    // A trainer restored from the checkpoint holds the same reference and takes none of its own.
    Trainer u(Tiny(Head::kLanguageModel, 7), nullptr, o);
    {
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> up = u.policy().parameters(), tp = t.policy().parameters();
      for (size_t i = 0; i < up.size(); ++i) up[i].copy_(tp[i]);
    }
    u.actor_optimizer().SyncMasterFromParams();
    ASSERT_TRUE(u.LoadState(t.State()).ok());
    ASSERT_NE(u.kl_reference(), nullptr);
    EXPECT_EQ(distance(weights(*u.kl_reference()), weights(*t.kl_reference())), 0.0);
    auto mt = t.PpoStep(batch), mu = u.PpoStep(batch);
    ASSERT_TRUE(mt.ok() && mu.ok());
    EXPECT_EQ(mu->count("kl_ref_taken"), 0u);
    EXPECT_NEAR((*mu)["kl_ref"], (*mt)["kl_ref"], 1e-6);
    // A reference of another shape is refused, naming it.
    std::map<std::string, at::Tensor> bad = t.State();
    bad["trainer/kl_ref/0"] = at::zeros({3});
    EXPECT_EQ(u.LoadState(bad).code(), absl::StatusCode::kInvalidArgument);
    // A new PPO stage takes a new reference: the actor as it is then.
    ASSERT_TRUE(t.SftStep(batch).ok());
    auto next = t.PpoStep(batch);
    ASSERT_TRUE(next.ok());
    EXPECT_EQ((*next)["kl_ref_taken"], 1);
    EXPECT_NEAR((*next)["kl_ref"], 0, 1e-9);
  }
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

// A critic saved with its trained value head and loaded again (a job's critic checkpoint, a
// continued run) keeps the head: only a fresh one is initialised at the first critic step.
TEST(TrainerTest, ACriticCheckpointKeepsItsTrainedHead) {
  std::vector<Sample> batch = {RandomSample("a", kMaskA, 51), RandomSample("b", kMaskB, 52)};
  Trainer a(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), {});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.ValueStep(batch).ok());
  auto before = a.CriticValues(batch);
  ASSERT_TRUE(before.ok()) << before.status();
  const std::string dir = learner::testing::TempDir() + "/critic_checkpoint";
  ASSERT_TRUE(a.critic()->Save(dir).ok());
  ModelOptions mo;
  mo.trainable = true;
  auto loaded = Transformer::Load(dir, Head::kValue, mo);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE((*loaded)->value_head_loaded());
  Trainer b(Tiny(Head::kLanguageModel, 5), std::move(*loaded), {});
  auto again = b.CriticValues(batch);
  ASSERT_TRUE(again.ok()) << again.status();
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_EQ((*again)[i].size(), (*before)[i].size());
    for (size_t t = 0; t < (*again)[i].size(); ++t) EXPECT_NEAR((*again)[i][t], (*before)[i][t], 1e-5);
  }
  auto m = b.ValueStep(batch);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->count("value_head_init"), 0u);  // The trained head was kept.
  // A critic started from a language model's trunk gets its head initialised, as before.
  Trainer c(Tiny(Head::kLanguageModel, 5), Tiny(Head::kValue, 6), {});
  auto fresh = c.ValueStep(batch);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->count("value_head_init"), 1u);
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
