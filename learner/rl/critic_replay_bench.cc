// Benchmark of the critic on a learning run's own trajectories: can the value
// model a job starts from learn to predict those trajectories' returns, at
// which critic learning rate and after how many value steps?
//
// In the GPU runs of docs/CODEMODEL.md the critic explained almost none of the
// return during PPO (explained variance about 0 over 25 updates), and a GPU
// run cannot tell whether the critic cannot learn these returns or was given
// too few steps to (one critic step per PPO update of 8 trajectories). This
// bench replays a finished job's accepted trajectories (its ledger and
// trajectories/, e.g. from a device call's logs.tgz) through the Trainer's
// own ValueStep, from the job's base checkpoint and with the job's
// hyper-parameters, one run per critic learning rate, and prints one JSON line
// every --every steps:
//   train_ev: the step's batch before it trained (what PPO's metric shows);
//   heldout_ev: every model token of held-out trajectories (never trained on)
//     against their Monte-Carlo return (the recipe's value_pretrain_heldout_ev);
//   heldout_ev_gae95: the same values against the paper's targets, V + GAE
//     (gamma 1, lambda 0.95; gae.h PaperValueTargets), for its curve only;
//   heldout_ev_first / heldout_ev_last: the value at each held-out
//     trajectory's first / last model token against its return: what the
//     task line alone predicts, and what the whole transcript (the tools'
//     verdicts included) predicts.
// The first run's learning rate is the baseline (pass the job's own first).
//
// Several jobs of one task set and base (seeds, sittings) pool their trajectories: --job_dir=A,B,...
// (the first job's hyper-parameters; a trajectory accepted by several, such as an imported warm-up
// set, counts once).
//
//   critic_replay_bench --job_dir=DIR[,DIR...] --base=CKPT [--lrs=1e-3,1e-4,1e-5] [--steps=32] [--every=8]
//                       [--train=48] [--heldout=16] [--device=cpu] [--threads=0] [--seed=1]
//                       [--train_stage=agent_warmup] [--heldout_jobs=1]
// --train_stage trains on that stage's trajectories only and holds out the others': what value
// pretraining on the warm-up set (the recipe's use_warmup_trajectories) predicts of PPO's rollouts.
// --heldout_jobs=N trains on the other jobs and holds out the last N's: what value pretraining on
// earlier jobs (recipe.value_pretrain.import_job_dirs) predicts of a new seed's rollouts.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/file.h"
#include "google/protobuf/text_format.h"
#include "learner/rl/dp_job.h"
#include "learner/rl/gae.h"
#include "learner/rl/ingest.h"
#include "learner/rl/ledger.h"
#include "learner/rl/job_config.h"
#include "learner/rl/sample.h"
#include "proto/learner.pb.h"

ABSL_FLAG(std::string, job_dir, "", "job directories (ledger.jsonl, job.textproto, trajectories/), comma-separated");
ABSL_FLAG(std::string, base, "", "the checkpoint the critic starts from (the job's base)");
ABSL_FLAG(std::string, lrs, "", "critic learning rates, comma-separated (default: the job's)");
ABSL_FLAG(int, steps, 32, "value steps per learning rate");
ABSL_FLAG(int, every, 8, "steps between held-out measurements");
ABSL_FLAG(int, train, 48, "trajectories trained on (cycled in batches of the job's trajectories_per_step)");
ABSL_FLAG(int, heldout, 16, "trajectories held out");
ABSL_FLAG(std::string, device, "cpu", "cpu (fp32) or cuda (bf16)");
ABSL_FLAG(int, threads, 0, "CPU intra-op threads (0 = LibTorch's default)");
ABSL_FLAG(uint64_t, seed, 1, "the split");
ABSL_FLAG(std::string, train_stage, "", "train on this stage's trajectories only, hold out the other stages' (\"\": a random split)");
ABSL_FLAG(int, heldout_jobs, 0, "hold out the last N job directories' trajectories, train on the others'");

namespace kernelrl::learner::rl {
namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "critic_replay_bench: %s\n", what.c_str());
  return 1;
}

int Run() {
  const std::vector<std::string> dirs = absl::StrSplit(absl::GetFlag(FLAGS_job_dir), ',', absl::SkipEmpty());
  const std::string base = absl::GetFlag(FLAGS_base);
  if (dirs.empty() || base.empty()) return Fail("usage: --job_dir=DIR[,DIR...] --base=CKPT [--lrs=...]");
  const std::string& dir = dirs.front();
  if (absl::GetFlag(FLAGS_threads) > 0) at::set_num_threads(absl::GetFlag(FLAGS_threads));
  auto job_text = ReadFileToString(dir + "/job.textproto");
  if (!job_text.ok()) return Fail(std::string(job_text.status().message()));
  v1::Job job;
  if (!google::protobuf::TextFormat::ParseFromString(*job_text, &job)) return Fail(dir + "/job.textproto does not parse");
  auto config = ParseJobConfig(job.spec().hyperparameters_text());
  if (!config.ok()) return Fail(std::string(config.status().message()));
  const bool cuda = absl::GetFlag(FLAGS_device) == "cuda";
  config->mutable_device()->set_device(cuda ? "cuda" : "cpu");
  config->mutable_device()->set_dtype(cuda ? "bfloat16" : "float32");

  // Every accepted trajectory of the jobs, in ledger order (each once), then a seeded split.
  const std::string train_stage = absl::GetFlag(FLAGS_train_stage);
  std::vector<v1::Trajectory> all, others;  // with --train_stage or --heldout_jobs: trained on, held out
  std::set<std::string> seen;
  const int heldout_jobs = absl::GetFlag(FLAGS_heldout_jobs);
  if (heldout_jobs < 0 || heldout_jobs >= static_cast<int>(dirs.size()) || (heldout_jobs > 0 && !train_stage.empty())) {
    return Fail("--heldout_jobs: 0 to the number of job directories - 1, not with --train_stage");
  }
  for (size_t k = 0; k < dirs.size(); ++k) {
    const std::string& d = dirs[k];
    const bool held_job = static_cast<int>(k) >= static_cast<int>(dirs.size()) - heldout_jobs;
    auto records = Ledger::Read(d + "/ledger.jsonl");
    if (!records.ok()) return Fail(std::string(records.status().message()));
    for (const v1::LedgerRecord& r : *records) {
      if (r.kind() != v1::LedgerRecord::ACCEPTED || !seen.insert(r.trajectory_id()).second) continue;
      auto t = Ingest::ReadTrajectory(d, r.trajectory_id());
      if (!t.ok()) return Fail(std::string(t.status().message()));
      const bool trains = heldout_jobs > 0 ? !held_job : train_stage.empty() || r.stage() == train_stage;
      (trains ? all : others).push_back(*std::move(t));
    }
  }
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::shuffle(all.begin(), all.end(), rng);
  std::shuffle(others.begin(), others.end(), rng);
  const bool split = train_stage.empty() && heldout_jobs == 0;  // A random split of one pool.
  const size_t nh = split ? std::min<size_t>(absl::GetFlag(FLAGS_heldout), all.size() / 4)
                          : std::min<size_t>(absl::GetFlag(FLAGS_heldout), others.size());
  const size_t nt = std::min<size_t>(absl::GetFlag(FLAGS_train), all.size() - (split ? nh : 0));
  if (nt == 0 || nh == 0) {
    return Fail(absl::StrCat("too few accepted trajectories in ", absl::GetFlag(FLAGS_job_dir),
                             train_stage.empty() ? "" : " (stage " + train_stage + " and the others)"));
  }
  auto samples = [&](const std::vector<v1::Trajectory>& from, size_t first, size_t n) {
    std::vector<Sample> out;
    for (size_t i = first; i < first + n; ++i) {
      auto s = SampleFromTrajectory(from[i], 0, config->batch().max_trajectory_tokens());
      if (s.ok()) out.push_back(*std::move(s));
    }
    return out;
  };
  const std::vector<Sample> train = samples(all, 0, nt);
  const std::vector<Sample> held = split ? samples(all, nt, nh) : samples(others, 0, nh);
  double mean = 0, var = 0;
  for (const Sample& s : held) mean += s.reward / held.size();
  for (const Sample& s : held) var += (s.reward - mean) * (s.reward - mean) / held.size();
  std::printf("{\"trajectories\": %zu, \"train\": %zu, \"heldout\": %zu, \"heldout_reward_mean\": %.3f, "
              "\"heldout_reward_var\": %.3f}\n",
              all.size() + others.size(), train.size(), held.size(), mean, var);

  std::vector<double> lrs;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_lrs), ',', absl::SkipEmpty())) {
    double lr = 0;
    if (!absl::SimpleAtod(s, &lr) || lr <= 0) return Fail("--lrs: not a learning rate: " + std::string(s));
    lrs.push_back(lr);
  }
  if (lrs.empty()) lrs.push_back(config->critic_optimizer().lr());
  const int n = std::max(1, config->batch().trajectories_per_step());
  for (double lr : lrs) {
    v1::LearnerJobConfig c = *config;
    c.mutable_critic_optimizer()->set_lr(lr);
    auto trainer = MakeJobTrainer(c, base, base, {}, cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU));
    if (!trainer.ok()) return Fail(std::string(trainer.status().message()));
    const absl::Time start = absl::Now();
    for (int step = 1; step <= absl::GetFlag(FLAGS_steps); ++step) {
      const size_t b = ((step - 1) * n) % train.size();
      std::vector<Sample> batch(train.begin() + b, train.begin() + std::min(train.size(), b + n));
      auto m = (*trainer)->ValueStep(batch);
      if (!m.ok()) return Fail(std::string(m.status().message()));
      if (step % absl::GetFlag(FLAGS_every) != 0 && step != 1) continue;
      auto values = (*trainer)->CriticValues(held);
      if (!values.ok()) return Fail(std::string(values.status().message()));
      std::vector<float> v, r, first, last, rt, p95;
      for (size_t i = 0; i < held.size(); ++i) {
        const std::vector<float>& vi = (*values)[i];
        if (vi.empty()) continue;
        v.insert(v.end(), vi.begin(), vi.end());
        r.insert(r.end(), vi.size(), static_cast<float>(held[i].reward));
        const std::vector<float> t = PaperValueTargets(vi, held[i].reward);
        p95.insert(p95.end(), t.begin(), t.end());
        first.push_back(vi.front()), last.push_back(vi.back()), rt.push_back(static_cast<float>(held[i].reward));
      }
      std::printf("{\"lr\": %g, \"step\": %d, \"train_ev\": %.3f, \"value_loss\": %.4f, \"heldout_ev\": %.3f, "
                  "\"heldout_ev_first\": %.3f, \"heldout_ev_last\": %.3f, \"heldout_ev_gae95\": %.3f, "
                  "\"seconds\": %.0f}\n",
                  lr, step, (*m)["explained_variance"], (*m)["value_loss"], ExplainedVariance(v, r),
                  ExplainedVariance(first, rt), ExplainedVariance(last, rt), ExplainedVariance(v, p95),
                  absl::ToDoubleSeconds(absl::Now() - start));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kernelrl::learner::rl

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kernelrl::learner::rl::Run();
}
