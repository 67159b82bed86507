// CPU benchmark of the recipe's trainer on a task-conditioned bandit shaped
// like the learning run's family tasks (docs/LEARNING.md): can the small model
// from scratch learn a *different* best design per task family, and in how
// many PPO updates at a given actor learning rate?
//
// On the H100 (the learning run, docs/LEARNING.md) the policy improved the trained reward but gave about
// the same replies to every family. The GPU run cannot say why: it has ~60
// PPO updates and a noisy held-out figure. This bench runs the same Trainer
// (PPO with the critic or per-task baselines and normalised advantages, RFT as SFT on the
// R > 0 warm-up samples, value pretraining) with the run's model shape and
// prompt length on a reward it computes itself, in seconds per update on a CPU.
//
//   bandit_bench [--reply=token|slots] [--lrs=3e-4,1e-3,2e-3] [--updates=300] [--every=20] [--seed=1]
//                [--groups=4]   (tasks per PPO batch, 4 rollouts each: the run's BATCH is 4 x groups)
//                [--warmup=48]  (random warm-up answers; RFT keeps those with R > 0)
//                [--entropy_coef=0]  (PpoConfig.entropy_coef)
//                [--estimator=critic|baseline]  (PpoConfig.task_baseline: the critic's GAE or the per-task baseline)
//                [--eval_samples=256]  (sampled replies per task at each evaluation)
//                [--value_cap=16] [--min_ev=0.3]  (value pretraining: fresh rollouts of the RFT policy until the
//                                                  explained variance before an update reaches min_ev, or the cap)
//                [--difficulty=0]  (a per-task reward offset, see below)
//                [--critic_trunk=rft|fresh]  (what the critic starts from, see below)
//                [--tail=0]  (model tokens after the design slots, see below)
//                [--kl_ref_coef=0]  (PpoConfig.kl_ref_coef: the pull back to the PPO stage's start)
//
// The task: a fixed 250-token prompt (the system and user turns), then a
// family token and a shape token (the task line), then the assistant header.
// --reply=token: the policy answers one token; --reply=slots: four, one per
// design slot, read as the choice policy reads a reply (id mod the slot's
// options), paid as the H100 verdicts of the family's templates (Reward()).
// Training tasks: 3 families x 2 shapes; held-out: each family with a shape
// token never trained on. One JSON line per evaluation (256 sampled replies
// per task): stage, update, actor lr, mean reward on the training and
// held-out tasks, the rate of reward 3 (faster than torch.compile) and
// I(family; first slot) in bits (log2 3 = 1.58 when each family gets its own),
// and the critic's explained variance on the last PPO batch (before its
// update). One line per value-pretraining update: its explained variance on
// the fresh batch, and on the last, what ended it ("ev" or "cap"). One line
// per PPO update: the batch's mean reward beside the explained variance.
//
// What the critic can explain. It sees the states before each model token:
// with --reply=token only the prompt, and the tasks' mean rewards under the
// RFT policy differ little: they carry 0.2-0.3 of the reward's variance, the
// most any critic explains (printed as "prompt_ev_bound", estimated from the
// evaluation samples); with --reply=slots the states after the first three
// slots add some (about 0.25 in all for a uniform policy). --difficulty=D
// adds a per-task offset (D x -1, 0 or +1; each value on two training tasks
// and on one held-out task, mean 0): tasks that differ in how hard they are,
// as the run's tasks do. An offset per task changes no task's best reply and
// cancels in the per-task baseline; the critic must learn it.
//
// The critic's trunk. In the run the critic starts from the base checkpoint,
// a pretrained model whose hidden state already tells prompts apart. Here the
// base is random: at the last prompt position its hidden state barely depends
// on the two task tokens among 255 shared ones (values equal across tasks to
// 1e-3), and in 16-80 value updates a fresh critic learns only the batch mean
// (explained variance 0.000). --critic_trunk=rft (the default) starts the
// critic from the RFT policy's trunk (embedding, layers, final norm; the value
// head is the trainer's fresh one), the one model here that reads the prompt;
// --critic_trunk=fresh keeps the separately seeded random model.
//
// The tail. In the run the design lines open a kernel that the model writes on for ~1,400 more
// tokens (the rest of the kernel, model_new.py, the Verify and Profile calls) before the verdict.
// --tail=K appends K fixed tokens to every reply as model tokens (scored by the policy, so they carry
// its log-probs; the warm-up's replies carry them too, so RFT teaches them like boilerplate): the
// design slots then sit K tokens before the outcome reward, as in the run. With the critic's
// length-adaptive GAE the reward's own weight on them is ~e^(-20 K / (K + 4)).
//
// Explained variance is printed twice: on each training batch before its
// update (what the learner reports and value pretraining stops on; 16
// trajectories, noisy) and as "fresh_ev" on 96 fresh rollouts of the training
// tasks that nothing trains on.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "learner/model.h"
#include "learner/test_util.h"
#include "learner/rl/gae.h"
#include "learner/rl/sample.h"
#include "learner/rl/trainer.h"

namespace kernelrl::learner::rl {
namespace {

constexpr int kVocab = 1190, kPrefix = 250, kFamilies = 3, kSlots = 4;
// Token ids: the task line's family and shape tokens, the assistant header, the end of turn.
constexpr int32_t kFamilyTok = 900, kShapeTok = 910, kHeader[] = {1100, 1101, 1102}, kImEnd = 1189;
constexpr int32_t kDigitTok = 300;  // '0'..'5': what the random warm-up actors answer.

// --reply=token: one token, design = id mod 6; each family pays its own design 3, design 1 pays 2
// everywhere (the compromise), the rest 1 or -1.
constexpr double kTokenReward[kFamilies][6] = {{3, 2, 1, 1, -1, -1}, {1, 2, 3, -1, 1, -1}, {-1, 2, 1, 3, 1, 1}};
// --reply=slots: four tokens, slot i = id mod the family's option count (data/family/family.h), and
// the H100 verdict classes of docs/LEARNING.md (a): elementwise fp16 wrong, uncoalesced work slower,
// float4 faster than compile, else faster than eager; rowreduce fp16 wrong, thread/block per row
// slower, warp per row with scalar loads faster than compile, vec4 faster than eager; GEMM tiled
// slower, cuBLAS fast-fp16 faster than compile, cuBLAS fp32 faster than eager. A reply like 1000
// pays 2, 3 and 1: what a policy that ignores the family can settle on.
constexpr int kOptions[kFamilies][kSlots] = {{3, 3, 3, 2}, {3, 3, 2, 2}, {3, 2, 3, 2}};

bool g_slots = false;
int g_eval_samples = 256;  // --eval_samples: sampled replies per task at each evaluation.
bool g_baseline = false;  // --estimator=baseline
int g_value_cap = 16;
double g_min_ev = 0.3;
int g_groups = 4;
int g_warmup = 48;
double g_entropy_coef = 0;
double g_difficulty = 0;
bool g_fresh_critic = false;  // --critic_trunk=fresh
int g_tail = 0;               // --tail
double g_kl_ref_coef = 0;     // --kl_ref_coef

// The --tail tokens: a phrase of 8 ids no other token here uses, repeated: boilerplate that RFT
// makes near-certain, as the run's JSON and template code are (entropy ~0.01 a token there).
const std::vector<int32_t>& Tail() {
  static const std::vector<int32_t> tail = [] {
    at::Generator g = at::detail::createCPUGenerator(11);
    at::Tensor phrase = at::randint(400, 800, {8}, g, at::kLong);
    std::vector<int32_t> out;
    for (int i = 0; i < g_tail; ++i) out.push_back(static_cast<int32_t>(phrase[i % 8].item<int64_t>()));
    return out;
  }();
  return tail;
}

int ReplyTokens() { return g_slots ? kSlots : 1; }

double Reward(int family, const std::vector<int32_t>& reply) {
  if (!g_slots) return kTokenReward[family][reply[0] % 6];
  int s[kSlots];
  for (int i = 0; i < kSlots; ++i) s[i] = reply[i] % kOptions[family][i];
  switch (family) {
    case 0: return s[3] == 1 ? -1 : s[2] == 2 ? 1 : s[0] == 2 ? 3 : 2;  // elementwise
    case 1: return s[3] == 1 ? -1 : s[0] != 1 ? 1 : s[2] == 0 ? 3 : 2;  // rowreduce
    default: return s[0] != 0 ? 1 : s[3] == 1 ? 3 : 2;                  // gemm_epilogue
  }
}

// The design slot a family's best reply is told apart by: the first (vector width / strategy / GEMM).
int FirstSlot(int family, const std::vector<int32_t>& reply) {
  return reply[0] % (g_slots ? kOptions[family][0] : 6);
}

struct Task {
  int family, shape;  // shape 0, 1: trained; 2: held out.
  std::string id() const { return std::to_string(family) + "/" + std::to_string(shape); }
};

// --difficulty: -D, 0 or +D by task; over the training tasks (shapes 0, 1)
// and over the held-out ones (shape 2) the offsets sum to 0.
double Offset(const Task& t) { return g_difficulty * ((t.family + t.shape) % 3 - 1); }

// What a reply to the task is paid: its design's verdict plus the task's offset.
double Paid(const Task& t, const std::vector<int32_t>& reply) { return Reward(t.family, reply) + Offset(t); }

std::vector<int32_t> Prompt(const Task& t) {
  static const std::vector<int32_t> prefix = [] {
    at::Generator g = at::detail::createCPUGenerator(7);
    at::Tensor ids = at::randint(0, 800, {kPrefix}, g, at::kLong);
    return std::vector<int32_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + kPrefix);
  }();
  std::vector<int32_t> p = prefix;
  p.push_back(kFamilyTok + t.family);
  p.push_back(kShapeTok + t.family * 3 + t.shape);
  for (int32_t h : kHeader) p.push_back(h);
  return p;
}

// logp: the reply's log-probs, then (with --tail) the tail's.
Sample MakeSample(const Task& t, const std::vector<int32_t>& reply, const std::vector<float>& logp, int64_t n) {
  Sample s;
  s.id = t.id() + "#" + std::to_string(n);
  s.task_id = t.id();
  s.ids = Prompt(t);
  s.loss_mask.assign(s.ids.size(), 0);
  s.rollout_logprobs.assign(s.ids.size(), 0.f);
  for (size_t i = 0; i < reply.size(); ++i) {
    s.ids.push_back(reply[i]), s.loss_mask.push_back(1), s.rollout_logprobs.push_back(logp[i]);
  }
  for (size_t i = 0; i < Tail().size(); ++i) {
    s.ids.push_back(Tail()[i]), s.loss_mask.push_back(1), s.rollout_logprobs.push_back(logp.at(reply.size() + i));
  }
  s.ids.push_back(kImEnd), s.loss_mask.push_back(0), s.rollout_logprobs.push_back(0.f);
  s.reward = Paid(t, reply);
  return s;
}

// `per_task` replies to each task, sampled token by token from the policy at temperature 1.
struct Replies {
  std::vector<std::vector<int32_t>> ids;  // [task * per_task + k] -> reply
  std::vector<std::vector<float>> logp;   // The reply's, then the tail's when scored.
};

// with_tail: the policy's log-probs of the --tail tokens after each reply, appended to logp (what a
// training rollout carries; evaluations read only the design slots).
Replies SampleReplies(Transformer& policy, const std::vector<Task>& tasks, int per_task, at::Generator& g,
                      bool with_tail = false) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> rows;
  for (const Task& t : tasks) {
    const std::vector<int32_t> prompt = Prompt(t);
    at::Tensor row = at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong);
    for (int k = 0; k < per_task; ++k) rows.push_back(row);
  }
  at::Tensor seq = at::stack(rows);  // [n, T]
  const int64_t n = seq.size(0);
  Replies out;
  out.ids.assign(n, {});
  out.logp.assign(n, {});
  for (int r = 0; r < ReplyTokens(); ++r) {
    at::Tensor logits = policy.Logits(seq);
    at::Tensor lp = at::log_softmax(logits.select(1, logits.size(1) - 1).to(at::kFloat), -1);  // [n, V]
    at::Tensor y = at::multinomial(lp.exp(), 1, true, g);                                     // [n, 1]
    at::Tensor ly = lp.gather(1, y).squeeze(1);
    for (int64_t i = 0; i < n; ++i) {
      out.ids[i].push_back(static_cast<int32_t>(y[i][0].item<int64_t>()));
      out.logp[i].push_back(ly[i].item<float>());
    }
    seq = at::cat({seq, y}, 1);
  }
  if (with_tail && g_tail > 0) {
    const std::vector<int32_t>& tail = Tail();
    at::Tensor t = at::tensor(std::vector<int64_t>(tail.begin(), tail.end()), at::kLong).unsqueeze(0).expand({n, g_tail});
    const int64_t before = seq.size(1);
    at::Tensor logits = policy.Logits(at::cat({seq, t}, 1));
    // The logits at position p predict token p + 1: the tail's come from positions before-1 .. before+K-2.
    at::Tensor lp = at::log_softmax(logits.narrow(1, before - 1, g_tail).to(at::kFloat), -1);
    at::Tensor lt = lp.gather(2, t.unsqueeze(2)).squeeze(2);  // [n, K]
    for (int64_t i = 0; i < n; ++i) {
      for (int k = 0; k < g_tail; ++k) out.logp[i].push_back(lt[i][k].item<float>());
    }
  }
  return out;
}

void OrDie(const absl::Status& s) {
  if (!s.ok()) std::fprintf(stderr, "bandit_bench: %s\n", s.ToString().c_str()), std::exit(1);
}

// Groups of `per_task` rollouts of `groups` training tasks (the learner leases a task in groups),
// with their per-task baselines set as the recipe sets them when that is the estimator.
std::vector<Sample> Rollouts(Transformer& policy, const std::vector<Task>& train, int groups, int per_task,
                                 at::Generator& g, int64_t* counter) {
  std::vector<Task> picked;
  at::Tensor which = at::randperm(static_cast<int64_t>(train.size()), g, at::kLong);
  for (int i = 0; i < groups; ++i) picked.push_back(train[which[i % train.size()].item<int64_t>()]);
  const Replies r = SampleReplies(policy, picked, per_task, g, /*with_tail=*/true);
  std::vector<Sample> batch;
  for (size_t i = 0; i < r.ids.size(); ++i) batch.push_back(MakeSample(picked[i / per_task], r.ids[i], r.logp[i], (*counter)++));
  if (g_baseline) SetTaskBaselines(&batch);
  return batch;
}

// The critic's explained variance against the return (the reward: gamma 1, outcome reward) over
// every model token of 96 fresh rollouts of the training tasks (16 per task).
double FreshEv(Trainer& t, const std::vector<Task>& train, at::Generator& g, int64_t* counter) {
  const std::vector<Sample> batch = Rollouts(t.policy(), train, 4 * static_cast<int>(train.size()), 4, g, counter);
  auto values = t.CriticValues(batch);
  OrDie(values.status());
  std::vector<float> v, r;
  for (size_t i = 0; i < batch.size(); ++i) {
    v.insert(v.end(), (*values)[i].begin(), (*values)[i].end());
    r.insert(r.end(), (*values)[i].size(), static_cast<float>(batch[i].reward));
  }
  return ExplainedVariance(v, r);
}

struct Eval {
  double reward = 0, top_rate = 0, mi_bits = 0, prompt_ev_bound = 0;
};

// Over g_eval_samples sampled replies per task (families weighted equally): mean reward, the rate of
// verdict 3 (faster than compile), I(family; first slot) in bits (log2 3 = 1.58 at most), and the
// share of the reward's variance between the tasks' means: the most a value of the prompt alone explains.
Eval Evaluate(Transformer& policy, const std::vector<Task>& tasks, at::Generator& g) {
  const Replies r = SampleReplies(policy, tasks, g_eval_samples, g);
  Eval e;
  std::map<std::pair<int, int>, double> joint;
  std::map<int, double> fam, slot;
  std::vector<double> task_mean(tasks.size(), 0.0);
  double sq = 0;
  const double w = 1.0 / static_cast<double>(r.ids.size());
  for (size_t i = 0; i < r.ids.size(); ++i) {
    const Task& t = tasks[i / g_eval_samples];
    const int f = t.family, s0 = FirstSlot(f, r.ids[i]);
    const double paid = Paid(t, r.ids[i]);
    e.reward += paid * w, sq += paid * paid * w;
    task_mean[i / g_eval_samples] += paid / g_eval_samples;
    e.top_rate += (Reward(f, r.ids[i]) == 3) * w;
    joint[{f, s0}] += w, fam[f] += w, slot[s0] += w;
  }
  for (const auto& [k, p] : joint) e.mi_bits += p * std::log2(p / (fam[k.first] * slot[k.second]));
  double between = 0;
  for (double m : task_mean) between += (m - e.reward) * (m - e.reward) / static_cast<double>(tasks.size());
  const double var = sq - e.reward * e.reward;
  e.prompt_ev_bound = var > 1e-12 ? between / var : 0;
  return e;
}

// entropy: the last PPO step's policy entropy per model token (-1 before PPO).
// m: the last PPO step's metrics (entropy, explained variance, trust-region fractions); empty before PPO.
// fresh_ev: FreshEv() now (-1 before value pretraining).
void Print(const char* stage, int update, double lr, Transformer& policy, const std::vector<Task>& train,
           const std::vector<Task>& heldout, at::Generator& g, StepMetrics m = {}, double fresh_ev = -1) {
  const Eval tr = Evaluate(policy, train, g), ho = Evaluate(policy, heldout, g);
  auto get = [&](const char* k) { return m.count(k) ? m[k] : -1.0; };
  std::printf(
      "{\"reply\":\"%s\",\"tail\":%d,\"kl_ref_coef\":%g,\"estimator\":\"%s\",\"stage\":\"%s\",\"update\":%d,\"batch\":%d,\"warmup\":%d,\"entropy_coef\":%g,\"actor_lr\":%g,\"train_reward\":%.3f,"
      "\"heldout_reward\":%.3f,\"train_top_rate\":%.3f,\"heldout_top_rate\":%.3f,\"train_mi_bits\":%.3f,"
      "\"heldout_mi_bits\":%.3f,\"entropy\":%.3f,\"explained_variance\":%.3f,\"fresh_ev\":%.3f,"
      "\"prompt_ev_bound\":%.3f,\"difficulty\":%g,\"clip_frac\":%.3f,\"mask_frac\":%.3f}\n",
      g_slots ? "slots" : "token", g_tail, g_kl_ref_coef, g_baseline ? "baseline" : "critic", stage, update, 4 * g_groups, g_warmup,
      g_entropy_coef, lr, tr.reward, ho.reward, tr.top_rate, ho.top_rate, tr.mi_bits, ho.mi_bits, get("entropy"),
      get("explained_variance"), fresh_ev, tr.prompt_ev_bound, g_difficulty, get("clip_frac"), get("mask_frac"));
  std::fflush(stdout);
}

std::unique_ptr<Transformer> Model(Head head, uint64_t seed) {
  // The shape tools/cli/up_quickstart.py makes for the learning run: the tests' tiny Qwen2, twice as wide.
  ModelConfig c = testing::TinyQwen2Config(kVocab);
  c.hidden_size = 64, c.intermediate_size = 176, c.head_dim = 16, c.max_position_embeddings = 8192;
  ModelOptions o;
  o.trainable = true;
  auto m = Transformer::Create(c, head, o, seed);
  OrDie(m.status());
  return std::move(*m);
}

// The recipe on the bandit: g_warmup random warm-up answers, RFT (20 epochs at 5e-3 on R > 0),
// value pretraining (up to g_value_cap updates on the RFT policy's rollouts, until the explained
// variance on a fresh batch reaches g_min_ev), then `updates` PPO updates at actor lr `lr`.
void Run(double lr, int updates, int every, uint64_t seed) {
  std::vector<Task> train, heldout;
  for (int f = 0; f < kFamilies; ++f) {
    train.push_back({f, 0}), train.push_back({f, 1}), heldout.push_back({f, 2});
  }
  at::manual_seed(seed);
  at::Generator g = at::detail::createCPUGenerator(seed);
  TrainerOptions o;  // The job defaults (learner/rl/job_config.cc) where they differ from the struct's.
  o.advantage = g_baseline ? AdvantageEstimator::kTaskBaseline : AdvantageEstimator::kCritic;
  o.lambda_length_alpha = 0.05;
  o.critic.head_lr_scale = 10;
  o.normalize_advantages = true;
  o.entropy_coef = g_entropy_coef;
  o.kl_ref_coef = g_kl_ref_coef;
  o.actor.lr = 5e-3;
  o.critic.lr = 1e-3;
  Trainer t(Model(Head::kLanguageModel, seed), Model(Head::kValue, seed + 1), o);
  Print("start", 0, lr, t.policy(), train, heldout, g);

  std::vector<Sample> kept;
  int64_t n = 0;
  for (int i = 0; i < g_warmup; ++i) {
    const Task& task = train[i % train.size()];
    std::vector<int32_t> reply;
    for (int k = 0; k < ReplyTokens(); ++k) {
      reply.push_back(kDigitTok + static_cast<int32_t>(at::randint(6, {1}, g, at::kLong).item<int64_t>()));
    }
    std::vector<float> logp(reply.size(), -std::log(6.f));
    logp.resize(reply.size() + Tail().size(), 0.f);  // RFT's SFT reads no rollout log-probs.
    Sample s = MakeSample(task, reply, logp, n++);
    if (s.reward > 0) kept.push_back(std::move(s));
  }
  for (int epoch = 0; epoch < 20; ++epoch) {
    for (size_t b = 0; b < kept.size(); b += 16) {
      std::vector<Sample> batch(kept.begin() + b, kept.begin() + std::min(kept.size(), b + 16));
      OrDie(t.SftStep(batch).status());
    }
  }
  Print("rft", 0, lr, t.policy(), train, heldout, g);
  if (!g_fresh_critic) {  // The critic's trunk := the RFT policy's; the value head stays the critic's own.
    at::NoGradGuard no_grad;
    const std::vector<at::Tensor> from = t.policy().parameters(), to = t.critic()->parameters();
    for (size_t i = 0; i + 2 < to.size(); ++i) {
      if (i >= from.size() || !from[i].sizes().equals(to[i].sizes())) OrDie(absl::InternalError("trunk shapes differ"));
      to[i].detach().copy_(from[i].detach());
    }
    t.critic_optimizer()->SyncMasterFromParams();
  }
  for (int i = 1; i <= g_value_cap; ++i) {
    auto m = t.ValueStep(Rollouts(t.policy(), train, 4, 4, g, &n));
    OrDie(m.status());
    const double ev = (*m)["explained_variance"];  // On the values before this update: a fresh batch.
    const bool done = ev >= g_min_ev || i == g_value_cap;
    std::printf("{\"estimator\":\"%s\",\"stage\":\"value_pretrain\",\"update\":%d,\"reward_mean\":%.3f,"
                "\"explained_variance\":%.3f,\"fresh_ev\":%.3f%s}\n",
                g_baseline ? "baseline" : "critic", i, (*m)["reward_mean"], ev, FreshEv(t, train, g, &n),
                !done ? "" : ev >= g_min_ev ? ",\"ended_by\":\"ev\"" : ",\"ended_by\":\"cap\"");
    std::fflush(stdout);
    if (done) break;
  }
  t.actor_optimizer().set_lr(lr);
  for (int u = 1; u <= updates; ++u) {
    auto m = t.PpoStep(Rollouts(t.policy(), train, g_groups, 4, g, &n));
    OrDie(m.status());
    std::printf("{\"estimator\":\"%s\",\"stage\":\"ppo_step\",\"update\":%d,\"reward_mean\":%.3f,"
                "\"explained_variance\":%.3f}\n",
                g_baseline ? "baseline" : "critic", u, (*m)["reward_mean"], (*m)["explained_variance"]);
    if (u % every == 0 || u == updates) Print("ppo", u, lr, t.policy(), train, heldout, g, *m, FreshEv(t, train, g, &n));
  }
}

}  // namespace
}  // namespace kernelrl::learner::rl

int main(int argc, char** argv) {
  std::vector<double> lrs = {3e-4, 1e-3, 2e-3};
  int updates = 300, every = 20;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const std::string& flag) { return a.rfind(flag, 0) == 0 ? a.substr(flag.size()) : ""; };
    bool ok = true;
    if (const std::string v = value("--lrs="); !v.empty()) {
      lrs.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) ok = ok && absl::SimpleAtod(s, &lrs.emplace_back());
    } else if (const std::string v = value("--updates="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &updates) && updates > 0;
    } else if (const std::string v = value("--every="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &every) && every > 0;
    } else if (const std::string v = value("--reply="); !v.empty()) {
      ok = v == "token" || v == "slots";
      kernelrl::learner::rl::g_slots = v == "slots";
    } else if (const std::string v = value("--groups="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &kernelrl::learner::rl::g_groups) && kernelrl::learner::rl::g_groups > 0;
    } else if (const std::string v = value("--warmup="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &kernelrl::learner::rl::g_warmup) && kernelrl::learner::rl::g_warmup > 0;
    } else if (const std::string v = value("--entropy_coef="); !v.empty()) {
      ok = absl::SimpleAtod(v, &kernelrl::learner::rl::g_entropy_coef) && kernelrl::learner::rl::g_entropy_coef >= 0;
    } else if (const std::string v = value("--estimator="); !v.empty()) {
      ok = v == "critic" || v == "baseline";
      kernelrl::learner::rl::g_baseline = v == "baseline";
    } else if (const std::string v = value("--value_cap="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &kernelrl::learner::rl::g_value_cap) && kernelrl::learner::rl::g_value_cap > 0;
    } else if (const std::string v = value("--min_ev="); !v.empty()) {
      ok = absl::SimpleAtod(v, &kernelrl::learner::rl::g_min_ev);
    } else if (const std::string v = value("--difficulty="); !v.empty()) {
      ok = absl::SimpleAtod(v, &kernelrl::learner::rl::g_difficulty) && kernelrl::learner::rl::g_difficulty >= 0;
    } else if (const std::string v = value("--critic_trunk="); !v.empty()) {
      ok = v == "rft" || v == "fresh";
      kernelrl::learner::rl::g_fresh_critic = v == "fresh";
    } else if (const std::string v = value("--kl_ref_coef="); !v.empty()) {
      ok = absl::SimpleAtod(v, &kernelrl::learner::rl::g_kl_ref_coef) && kernelrl::learner::rl::g_kl_ref_coef >= 0;
    } else if (const std::string v = value("--tail="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &kernelrl::learner::rl::g_tail) && kernelrl::learner::rl::g_tail >= 0;
    } else if (const std::string v = value("--eval_samples="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &kernelrl::learner::rl::g_eval_samples) && kernelrl::learner::rl::g_eval_samples > 0;
    } else if (const std::string v = value("--seed="); !v.empty()) {
      ok = absl::SimpleAtoi(v, &seed);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bandit_bench: bad flag %s\nusage: bandit_bench [--reply=token|slots] [--lrs=A,B] [--updates=N] [--every=K] [--seed=S] [--groups=G] [--warmup=W] [--entropy_coef=C] [--estimator=critic|baseline] [--value_cap=N] [--min_ev=X] [--difficulty=D] [--critic_trunk=rft|fresh] [--tail=K] [--kl_ref_coef=C] [--eval_samples=N]\n",
                   a.c_str());
      return 2;
    }
  }
  at::set_num_threads(2);
  for (double lr : lrs) kernelrl::learner::rl::Run(lr, updates, every, seed);
  return 0;
}
