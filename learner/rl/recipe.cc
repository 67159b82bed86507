#include "learner/rl/recipe.h"

#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/gpu_lease.h"
#include "common/log.h"
#include "learner/checkpoint.h"
#include "learner/sync/weight_sink.h"
#include "learner/rl/dp_job.h"
#include "learner/rl/gae.h"
#include "learner/rl/job_config.h"
#include "learner/rl/rft_filter.h"
#include "learner/rl/trainer.h"
#include "learner/rl/warmup_import.h"

namespace kernelrl::learner::rl {
namespace {

enum class Kind { kPpo, kCollect, kSft, kValue };
struct Stage {
  const char* name;
  Kind kind;
};
constexpr Stage kStages[] = {{"single_turn_ppo", Kind::kPpo},
                             {"agent_warmup", Kind::kCollect},
                             {"rft", Kind::kSft},
                             {"value_pretrain", Kind::kValue},
                             {"agentic_ppo", Kind::kPpo}};
constexpr int kNumStages = 5;

// StageConfig.take_policies of the stages that have a StageConfig (RFT and
// value pretraining have their own messages and the kind's rule).
std::vector<std::string> TakePolicies(const v1::RecipeConfig& r, int stage) {
  const v1::StageConfig* c = stage == 0 ? &r.single_turn_ppo() : stage == 1 ? &r.agent_warmup()
                             : stage == 4 ? &r.agentic_ppo() : nullptr;
  if (c == nullptr) return {};
  return {c->take_policies().begin(), c->take_policies().end()};
}

// A shared hold on the GPU lease around a span of the learner's GPU work;
// its kernels are done before the lease can go to a sandbox timing on this
// GPU (common/gpu_lease.h). The wait is on this thread's stream, not the
// device: a device-wide synchronise fails while the policy engine's thread
// captures a decode graph, and c10 turns that into an abort.
class GpuWork {
 public:
  GpuWork(GpuLease::Hold hold, bool cuda) : hold_(std::move(hold)), cuda_(cuda) {}
  GpuWork(GpuWork&&) = default;
  GpuWork& operator=(GpuWork&&) = default;
  ~GpuWork() {
    if (cuda_ && hold_.held()) c10::cuda::getCurrentCUDAStream().synchronize();
  }

 private:
  GpuLease::Hold hold_;
  bool cuda_ = false;
};

class RecipeRunner : public JobRunner {
 public:
  RecipeRunner(WeightSink* sink, LearnerMetrics* metrics, DpLeader* dp, const std::string& gpu_lease_path)
      : sink_(sink), metrics_(metrics), dp_(dp), lease_(gpu_lease_path) {}
  absl::Status Run(JobContext* ctx) override;
  absl::Status RunStages(JobContext* ctx);

 private:
  absl::Status Setup(JobContext* ctx);
  // Steps in a stage (0 = skip it) and whether it is switched off.
  int64_t StageSteps(int stage) const;
  absl::Status RunStage(JobContext* ctx, int stage);
  absl::Status ImportWarmup(JobContext* ctx, int stage, int64_t steps);
  // Waits for a batch of whole groups (n trajectories); empty when the job should stop.
  absl::StatusOr<std::vector<v1::Trajectory>> WaitForBatch(JobContext* ctx, const char* stage, int n,
                                                           bool drop_zero_variance);
  // Value pretraining; ends at the explained-variance level or the step cap.
  absl::Status RunValuePretrain(JobContext* ctx, int stage);
  // rewards: of the trajectories the step trained on (the reward histogram).
  absl::Status Commit(JobContext* ctx, int stage, const std::vector<std::string>& trained, StepMetrics metrics,
                      const std::vector<Sample>& samples);
  // The full checkpoint of `step` (ledger committed): its directory.
  absl::StatusOr<std::string> SaveFull(int stage, int64_t step, int64_t version, int64_t stage_step);
  // The policy alone, for weight sync: exports/step-N.
  absl::StatusOr<std::string> ExportPolicy(int64_t step);
  // The policy as one resident model: the trainer's, or a sharded one
  // consolidated on rank 0 (a collective step of every rank), held in *whole.
  absl::StatusOr<const Transformer*> WholePolicy(std::unique_ptr<Transformer>* whole);
  // Version version_ to the sink: from memory where it takes models, else
  // `policy_dir`: an export, or a full checkpoint's policy/ (`checkpoint`),
  // for which a LoRA job writes an export, since a checkpoint keeps the
  // adapters apart from the base.
  absl::Status Publish(const std::string& policy_dir, bool checkpoint, int64_t step);
  // A full checkpoint of the current state unless the last update had one.
  absl::Status Flush();
  std::vector<Sample> ToSamples(const std::vector<v1::Trajectory>& ts, StepMetrics* m) const;
  // Value pretraining's imported returns (ValuePretrainConfig.import_job_dirs).
  absl::StatusOr<std::vector<Sample>> ImportedReturns(StepMetrics* m) const;
  // One update on the global batch: this rank's shard when data-parallel.
  absl::StatusOr<StepMetrics> Train(StepKind kind, const std::vector<Sample>& batch);
  // PpoConfig.critic_replay_batches: one more critic step, on `batch` and the stage's last N - 1
  // trained batches; its size and loss go into *m.
  absl::Status ReplayForCritic(const std::string& stage, const std::vector<Sample>& batch, StepMetrics* m);
  // The lease held shared until the returned GpuWork goes (an unheld one without a lease).
  absl::StatusOr<GpuWork> HoldGpu() const;

  WeightSink* sink_;  // Where each committed version is served from (may be null).
  LearnerMetrics* metrics_;
  DpLeader* dp_;  // Null: one rank.
  const GpuLease lease_;  // Held shared around steps, checkpoints and publishes ("" = none).
  bool dp_setup_ = false;
  double peak_flops_ = 0;  // All devices of the step, for MFU.
  v1::LearnerJobConfig config_;
  v1::JobSpec spec_;
  std::vector<v1::Task> tasks_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<Ingest> ingest_;
  std::string ckpt_root_;
  int64_t step_ = 0, version_ = 0, stage_ = 0, stage_step_ = 0;
  int64_t durable_step_ = 0;  // Of the last full checkpoint.
};

absl::Status RecipeRunner::Setup(JobContext* ctx) {
  const v1::Job job = ctx->job();
  spec_ = job.spec();
  auto config = ParseJobConfig(spec_.hyperparameters_text());
  if (!config.ok()) return config.status();
  config_ = *config;
  auto tasks = LoadTaskSet(spec_.task_set());
  if (!tasks.ok()) return tasks.status();
  tasks_ = std::move(*tasks);
  ModelOptions mo;
  std::string device = config_.device().device();
  if (device.empty()) device = at::hasCUDA() ? "cuda" : "cpu";
  mo.device = at::Device(device);
  if (dp_ != nullptr && mo.device.is_cuda()) mo.device = dp_->dp()->device();  // Rank 0's GPU.
  peak_flops_ = config_.device().peak_tflops() > 0 ? config_.device().peak_tflops() * 1e12
                : mo.device.is_cuda()              ? 989e12
                                                   : 0;
  at::manual_seed(config_.seed());
  ckpt_root_ = ctx->dir() + "/checkpoints";
  std::string policy_dir = spec_.base_checkpoint();
  std::string critic_dir = spec_.critic_checkpoint().empty() ? spec_.base_checkpoint() : spec_.critic_checkpoint();
  std::map<std::string, at::Tensor> optimizer;
  auto latest = LoadLatestCheckpoint(ckpt_root_, /*restore_rng=*/true);
  if (latest.ok()) {
    policy_dir = latest->policy_dir;
    if (!latest->critic_dir.empty()) critic_dir = latest->critic_dir;
    step_ = durable_step_ = latest->step;
    version_ = latest->policy_version;
    optimizer = std::move(latest->optimizer);
    stage_ = optimizer.count("recipe/stage") ? optimizer["recipe/stage"].item<int64_t>() : 0;
    stage_step_ = optimizer.count("recipe/stage_step") ? optimizer["recipe/stage_step"].item<int64_t>() : 0;
  } else if (!absl::IsNotFound(latest.status())) {
    return latest.status();
  }
  // Agent warm-up has no checkpoint of its own: the job record carries its cursor.
  if (job.stage() == "rft" && stage_ < 2) stage_ = 2, stage_step_ = 0;
  // Data-parallel: every rank builds its trainer from the same files.
  auto trainer = dp_ != nullptr ? dp_->Setup(ctx->dir(), mo.device, policy_dir, critic_dir,
                                             latest.ok() ? latest->dir : "", spec_.hyperparameters_text(), optimizer)
                                : MakeJobTrainer(config_, policy_dir, critic_dir, optimizer, mo.device);
  if (!trainer.ok()) return trainer.status();
  trainer_ = std::move(*trainer);
  if (dp_ != nullptr) {
    dp_setup_ = true;
    peak_flops_ *= dp_->world_size();
  }
  IngestOptions io;
  io.max_policy_lag = config_.ingest().max_policy_lag();
  io.buffer_capacity = config_.ingest().buffer_capacity();
  io.lease_timeout_seconds = config_.ingest().lease_timeout_seconds();
  io.max_infra_reruns = config_.ingest().max_infra_reruns();
  io.vocab_size = trainer_->policy().config().vocab_size;
  io.max_trajectory_tokens = config_.batch().max_trajectory_tokens();
  io.temperature = config_.ppo().temperature();
  io.zero_variance_cooldown_groups = config_.ppo().zero_variance_cooldown_groups();
  io.seed = config_.seed();
  io.shuffle_tasks = config_.ingest().shuffle_tasks();
  io.task_order_seed = config_.ingest().task_order_seed();
  io.deferred_task_ids.assign(config_.ingest().deferred_task_ids().begin(), config_.ingest().deferred_task_ids().end());
  // A batch is whole groups: up to max(trajectories_per_step, rollouts_per_task) trajectories.
  io.max_pending_in_stage = (config_.ingest().max_policy_lag() + 1) *
                            static_cast<int64_t>(std::max({1, config_.batch().trajectories_per_step(),
                                                           spec_.rollouts_per_task()}));
  const int bound = config_.ppo().max_zero_variance_drops_per_step();
  io.max_zero_variance_drops_per_step =
      bound < 0 ? 0
      : bound > 0 ? bound
                  : 4 * std::max(1, config_.batch().trajectories_per_step() / std::max(1, spec_.rollouts_per_task()));
  auto ingest = Ingest::Open(ctx->dir(), ctx->job_id(), io, step_);
  if (!ingest.ok()) return ingest.status();
  ingest_ = std::move(*ingest);
  ingest_->SetPolicyVersion(version_);
  // A resumed job: the policy server still holds the weights it started with
  // (the base checkpoint, version 0), and actors would sample from them and
  // tag their trajectories with that version, which ingest drops as stale.
  if (sink_ != nullptr && latest.ok()) {
    if (auto s = Publish(latest->policy_dir, /*checkpoint=*/true, step_); !s.ok()) return s;
  }
  KLOG(INFO) << "job " << ctx->job_id() << ": step " << step_ << ", policy version " << version_ << ", stage "
             << kStages[std::min<int64_t>(stage_, kNumStages - 1)].name << " step " << stage_step_ << " on "
             << device;
  return absl::OkStatus();
}

int64_t RecipeRunner::StageSteps(int stage) const {
  const auto& r = config_.recipe();
  switch (stage) {
    case 0: return r.single_turn_ppo().skip() ? 0 : r.single_turn_ppo().steps();
    case 1: return r.agent_warmup().skip() ? 0 : r.agent_warmup().steps();
    case 2: return r.rft().skip() ? 0 : r.rft().epochs();  // Epochs; steps per epoch follow from the data.
    case 3: return r.value_pretrain().skip() ? 0 : r.value_pretrain().steps();
    default:
      if (r.agentic_ppo().skip()) return 0;
      return spec_.max_steps() > 0 ? spec_.max_steps() : r.agentic_ppo().steps();
  }
}

std::vector<Sample> RecipeRunner::ToSamples(const std::vector<v1::Trajectory>& ts, StepMetrics* m) const {
  std::vector<Sample> out;
  for (const v1::Trajectory& t : ts) {
    auto s = SampleFromTrajectory(t, trainer_->policy().config().vocab_size, config_.batch().max_trajectory_tokens());
    if (s.ok()) {
      out.push_back(std::move(*s));
    } else if (m != nullptr) {
      (*m)["malformed_skipped"] += 1;
    }
  }
  return out;
}

absl::StatusOr<std::vector<Sample>> RecipeRunner::ImportedReturns(StepMetrics* m) const {
  std::set<std::string> task_ids, seen;
  for (const v1::Task& t : tasks_) task_ids.insert(t.id());
  std::vector<v1::Trajectory> all;
  for (const std::string& dir : config_.recipe().value_pretrain().import_job_dirs()) {
    auto got = ReadAcceptedTrajectories(dir, spec_.base_checkpoint(), task_ids);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat("recipe.value_pretrain.import_job_dirs: ", got.status().message()));
    }
    // Seeds that imported one warm-up set each hold it: once is enough.
    for (v1::Trajectory& t : *got) {
      if (seen.insert(t.id()).second) all.push_back(std::move(t));
    }
  }
  (*m)["value_pretrain_imported"] = static_cast<double>(all.size());
  // In ledger order the critic trains job after job, each of its own policies and reward level,
  // and follows the last one it saw: on two H200s, after eight batches of one job's late rollouts
  // (mean reward 0.14 against 0.62 over all), held-out explained variance at 0.25-0.28 fell to
  // -0.16..0.08 in each of three seeds. Seeded, so a resumed stage cycles the same order.
  std::mt19937_64 rng(config_.seed());
  std::shuffle(all.begin(), all.end(), rng);
  return ToSamples(all, m);
}

absl::StatusOr<StepMetrics> RecipeRunner::Train(StepKind kind, const std::vector<Sample>& global) {
  // Baselines over the global batch, before sharding: every rank gets the same
  // ones. Only for the per-task-baseline estimator's PPO: the critic's
  // targets are the raw reward.
  std::vector<Sample> batch = global;
  if (config_.ppo().task_baseline() && kind == StepKind::kPpo) SetTaskBaselines(&batch);
  std::vector<Sample> mine;
  int64_t n = 0;
  if (dp_ != nullptr) {
    auto shard = dp_->Step(kind, batch, trainer_->actor_optimizer().lr());
    if (!shard.ok()) return shard.status();
    mine = std::move(*shard);
    n = static_cast<int64_t>(batch.size());
  }
  const std::vector<Sample>& b = dp_ != nullptr ? mine : batch;
  absl::StatusOr<GpuWork> gpu = HoldGpu();  // a sandbox timing on this GPU waits for the step
  if (!gpu.ok()) return gpu.status();
  absl::StatusOr<StepMetrics> m = RunStep(*trainer_, kind, b, n);
  // Beside the critic's explained variance: how much of it the task line alone would give.
  if (m.ok() && m->count("explained_variance")) (*m)["explained_variance_task_means"] = TaskMeansExplainedVariance(global);
  return m;
}

absl::Status RecipeRunner::ReplayForCritic(const std::string& stage, const std::vector<Sample>& batch, StepMetrics* m) {
  const int n = config_.ppo().critic_replay_batches();
  if (n <= 1 || trainer_->critic() == nullptr) return absl::OkStatus();
  auto earlier = ingest_->TrainedIn(stage, n - 1);
  if (!earlier.ok()) return earlier.status();
  StepMetrics ignored;
  std::vector<Sample> replay = ToSamples(*earlier, &ignored);
  replay.insert(replay.end(), batch.begin(), batch.end());
  auto v = Train(StepKind::kCriticReplay, replay);
  if (!v.ok()) return v.status();
  (*m)["critic_replay_trajectories"] = static_cast<double>(replay.size());
  if (v->count("value_loss")) (*m)["critic_replay_value_loss"] = v->at("value_loss");
  return absl::OkStatus();
}

absl::StatusOr<GpuWork> RecipeRunner::HoldGpu() const {
  absl::StatusOr<GpuLease::Hold> hold = lease_.Shared();
  if (!hold.ok()) return hold.status();
  return GpuWork(std::move(*hold), trainer_->policy().options().device.is_cuda());
}

absl::StatusOr<std::vector<v1::Trajectory>> RecipeRunner::WaitForBatch(JobContext* ctx, const char* stage, int n,
                                                                        bool drop_zero_variance) {
  // While a batch fills, the job's message moves with each trajectory the ingest takes in or drops,
  // so that a client tells a slow job (a busy sandbox, equal-reward groups dropped) from a stalled one.
  int64_t seen = -1;
  while (!ctx->ShouldStop()) {
    if (!ctx->HoldWhilePaused()) break;  // Before the batch: a paused job's policy stays as it is.
    if (auto s = ingest_->ExpireLeases(); !s.ok()) return s;
    int groups = 0;
    auto batch = ingest_->Take(n, drop_zero_variance, &groups);
    if (!batch.ok()) return batch.status();
    const int need = ingest_->GroupsPerBatch(n);
    if (groups >= need) return batch;
    const IngestInfo info = ingest_->Info();
    const int64_t taken = info.accepted + info.rejected + info.zero_variance_groups_dropped + info.stale_dropped;
    if (taken != seen) {
      auto s = ctx->Update([&](v1::Job* j) {
        j->set_message(absl::StrCat(stage, " step ", stage_step_, ": waiting for a batch, ", groups, " of ", need,
                                    " groups ready (so far ", info.accepted, " trajectories accepted, ",
                                    info.zero_variance_groups_dropped, " equal-reward groups and ", info.stale_dropped,
                                    " stale trajectories dropped)"));
      });
      if (!s.ok()) return s;
    }
    seen = taken;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::vector<v1::Trajectory>{};
}

absl::Status RecipeRunner::Commit(JobContext* ctx, int stage, const std::vector<std::string>& trained,
                                  StepMetrics m, const std::vector<Sample>& samples) {
  // TRAINED records first: if the checkpoint below does not land, a restart voids them.
  const int64_t step = step_ + 1;
  if (!trained.empty()) {
    if (auto s = ingest_->MarkTrained(trained, step); !s.ok()) return s;
  }
  absl::StatusOr<GpuWork> gpu = HoldGpu();  // the checkpoint's and the publish's copies
  if (!gpu.ok()) return gpu.status();
  auto t0 = std::chrono::steady_clock::now();
  const bool full = step % std::max(1, config_.checkpoint().full_every()) == 0;
  // Between full checkpoints an export is written only for a sink that reads directories.
  const bool export_dir = !full && (sink_ == nullptr || !sink_->takes_models());
  absl::StatusOr<std::string> dir = std::string();
  if (full) {
    dir = SaveFull(stage, step, version_ + 1, stage_step_ + 1);
  } else if (export_dir) {
    dir = ExportPolicy(step);
  }
  if (!dir.ok()) return dir.status();
  if (full || export_dir) {
    m[full ? "checkpoint_seconds" : "export_seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  step_ = step, ++version_, ++stage_step_;
  ingest_->SetPolicyVersion(version_);
  if (sink_ != nullptr) {
    t0 = std::chrono::steady_clock::now();
    if (auto s = Publish(full ? *dir + "/policy" : *dir, /*checkpoint=*/full, step); !s.ok()) return s;
    m["weight_sync_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const IngestInfo info = ingest_->Info();
  m["buffer_depth"] = info.buffer_depth;
  m["staleness_max"] = info.max_staleness;
  m["active_leases"] = info.active_leases;
  m["stale_dropped_total"] = info.stale_dropped;
  m["infra_reruns_total"] = info.infra_reruns;
  m["infra_dropped_total"] = info.infra_dropped;
  m["sampling_mismatch_total"] = info.sampling_mismatch;
  m["non_model_rejected_total"] = info.non_model_rejected;
  m["zero_variance_groups_dropped_total"] = info.zero_variance_groups_dropped;
  m["tasks_cooling"] = info.tasks_cooling;
  m["zero_variance_groups_kept"] = info.zero_variance_groups_kept;
  m["policy_version"] = version_;
  if (peak_flops_ > 0 && m["step_seconds"] > 0) m["mfu"] = m["train_flops"] / m["step_seconds"] / peak_flops_;
  if (metrics_ != nullptr) {
    std::vector<double> rewards;
    for (const Sample& s : samples) rewards.push_back(s.reward);
    metrics_->RecordStep(m, rewards, version_, peak_flops_);
  }
  // The durable record of this update's figures, before the job shows the step.
  if (auto s = ingest_->RecordUpdate(step_, kStages[stage].name, stage_step_, version_, m); !s.ok()) return s;
  return ctx->Update([&](v1::Job* j) {
    j->set_step(step_);
    j->set_policy_version(version_);
    j->set_stage(kStages[stage].name);
    j->set_stage_step(stage_step_);
    j->mutable_metrics()->clear();
    for (const auto& [k, v] : m) (*j->mutable_metrics())[k] = v;
    j->set_message(absl::StrCat(kStages[stage].name, " step ", stage_step_, ": reward ", m["reward_mean"]));
  });
}

absl::StatusOr<std::string> RecipeRunner::SaveFull(int stage, int64_t step, int64_t version, int64_t stage_step) {
  CheckpointToSave ck;
  ck.policy_version = version;
  ck.step = step;
  ck.policy = &trainer_->policy();
  ck.critic = trainer_->critic();
  DpLeader::Consolidated whole;
  if (dp_ != nullptr && dp_->sharded()) {  // Every rank writes its shards; the export is the whole models.
    ck.shards_dir = absl::StrFormat("%s/.shards-step-%08d", ckpt_root_, step);
    auto c = dp_->Save(ck.shards_dir, trainer_.get());
    if (!c.ok()) return c.status();
    whole = std::move(*c);
    ck.policy = whole.policy.get();
    ck.critic = whole.critic.get();
  } else {
    ck.optimizer = trainer_->actor_optimizer().State("actor/");
    for (auto& [k, v] : trainer_->critic_optimizer()->State("critic/")) ck.optimizer[k] = v;
  }
  for (auto& [k, v] : trainer_->State()) ck.optimizer[k] = v;
  ck.optimizer["recipe/stage"] = at::tensor({static_cast<int64_t>(stage)}, at::kLong);
  ck.optimizer["recipe/stage_step"] = at::tensor({stage_step}, at::kLong);
  ck.keep_last = config_.checkpoint().keep_last();
  auto dir = SaveCheckpoint(ckpt_root_, ck);
  if (!dir.ok()) return dir.status();
  if (auto s = ingest_->Commit(step); !s.ok()) return s;
  durable_step_ = step;
  DropPolicyExports(ckpt_root_, step);
  return dir;
}

absl::StatusOr<const Transformer*> RecipeRunner::WholePolicy(std::unique_ptr<Transformer>* whole) {
  if (dp_ == nullptr || !dp_->sharded()) return &trainer_->policy();
  auto p = dp_->ExportPolicy(trainer_.get());
  if (!p.ok()) return p.status();
  *whole = std::move(*p);
  return whole->get();
}

absl::Status RecipeRunner::Publish(const std::string& policy_dir, bool checkpoint, int64_t step) {
  if (sink_->takes_shards() && dp_ != nullptr && dp_->sharded()) {  // From the shards, every rank gathering.
    return dp_->PublishShards(trainer_.get(), sink_, version_);
  }
  if (sink_->takes_models()) {  // From memory.
    std::unique_ptr<Transformer> whole;
    auto policy = WholePolicy(&whole);
    if (!policy.ok()) return policy.status();
    return sink_->PublishModel(**policy, version_);
  }
  if (config_.actor_lora().rank() == 0 || !checkpoint) {
    return sink_->Publish(policy_dir, version_);
  }
  // A checkpoint keeps LoRA adapters apart from the base: engines get an export, merged.
  auto merged = ExportPolicy(step);
  if (!merged.ok()) return merged.status();
  return sink_->Publish(*merged, version_);
}

absl::StatusOr<std::string> RecipeRunner::ExportPolicy(int64_t step) {
  std::unique_ptr<Transformer> whole;
  auto policy = WholePolicy(&whole);
  if (!policy.ok()) return policy.status();
  return SavePolicyExport(ckpt_root_, step, **policy);
}

absl::Status RecipeRunner::Flush() {
  if (step_ <= durable_step_) return absl::OkStatus();
  return SaveFull(static_cast<int>(stage_), step_, version_, stage_step_).status();
}

// The warm-up set of an earlier job (StageConfig.import_job_dir) in place of
// collecting one; nothing is leased in this stage.
absl::Status RecipeRunner::ImportWarmup(JobContext* ctx, int stage, int64_t steps) {
  const Stage& st = kStages[stage];
  const std::string& dir = config_.recipe().agent_warmup().import_job_dir();
  ingest_->SetStage(st.name, tasks_, std::max(1, spec_.rollouts_per_task()), /*max_fresh_issues=*/0,
                    /*model_only=*/false, TakePolicies(config_.recipe(), stage));
  std::set<std::string> task_ids;
  for (const v1::Task& t : tasks_) task_ids.insert(t.id());
  auto set = ReadWarmupSet(dir, spec_.base_checkpoint(), task_ids, steps);
  if (!set.ok()) return set.status();
  for (const v1::Trajectory& t : *set) {
    if (auto imported = ingest_->Import(st.name, t, dir); !imported.ok()) return imported.status();
  }
  KLOG(INFO) << "job " << ctx->job_id() << ": " << set->size() << " warm-up trajectories imported from " << dir;
  return ctx->Update([&](v1::Job* j) { j->set_stage("rft"), j->set_stage_step(0); });
}

absl::Status RecipeRunner::RunStage(JobContext* ctx, int stage) {
  const Stage& st = kStages[stage];
  const int64_t steps = StageSteps(stage);
  const auto& r = config_.recipe();
  const int n = config_.batch().trajectories_per_step();
  const bool fresh_values =
      st.kind == Kind::kValue && !r.value_pretrain().use_warmup_trajectories() && r.value_pretrain().import_job_dirs().empty();
  if (st.kind == Kind::kCollect && !r.agent_warmup().import_job_dir().empty()) return ImportWarmup(ctx, stage, steps);
  if (st.kind == Kind::kPpo || st.kind == Kind::kCollect || fresh_values) {
    const int max_turns = stage == 0   ? r.single_turn_ppo().max_turns()
                          : stage == 1 ? r.agent_warmup().max_turns()
                          : stage == 3 ? r.value_pretrain().max_turns()
                                       : r.agentic_ppo().max_turns();
    std::vector<v1::Task> tasks = tasks_;
    for (v1::Task& t : tasks) {
      if (max_turns > 0) (*t.mutable_metadata())["max_turns"] = std::to_string(max_turns);
      (*t.mutable_metadata())["stage"] = st.name;  // actors may pick a policy per stage
    }
    // PPO weights every token by pi / pi_rollout and value pretraining learns
    // the model's own returns: only the model's samples. The warm-up takes any.
    ingest_->SetStage(st.name, std::move(tasks), std::max(1, spec_.rollouts_per_task()),
                      st.kind == Kind::kCollect ? steps : -1,
                      /*model_only=*/st.kind != Kind::kCollect, TakePolicies(r, stage));
  }
  if (st.kind == Kind::kValue) return RunValuePretrain(ctx, stage);
  if (st.kind == Kind::kCollect) {
    // Collect until `steps` trajectories were accepted (or nothing is left to lease).
    while (!ctx->ShouldStop()) {
      if (!ctx->HoldWhilePaused()) break;
      if (auto s = ingest_->ExpireLeases(); !s.ok()) return s;
      const IngestInfo info = ingest_->Info();
      auto got = ingest_->AcceptedIn(st.name);
      if (!got.ok()) return got.status();
      auto status = ctx->Update([&](v1::Job* j) {
        j->set_stage(st.name);
        j->set_stage_step(static_cast<int64_t>(got->size()));
      });
      if (!status.ok()) return status;
      if (static_cast<int64_t>(got->size()) >= steps ||
          (info.cursor >= steps && info.active_leases == 0 && info.retry_queue == 0)) {
        return ctx->Update([&](v1::Job* j) { j->set_stage("rft"), j->set_stage_step(0); });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return absl::OkStatus();
  }
  if (st.kind == Kind::kPpo) {
    // The job says it is in this stage from its start, not from its first update; held there when
    // asked, so that a client evaluates the policy the earlier stages left (kernelrl learn's "PPO start").
    const bool hold = (stage == 0 ? r.single_turn_ppo() : r.agentic_ppo()).hold_at_start() && stage_step_ == 0;
    if (auto s = ctx->Update([&](v1::Job* j) {
          j->set_stage(st.name), j->set_stage_step(stage_step_);
          if (hold) j->set_paused(true), j->set_message(absl::StrCat(st.name, ": held at its start until resumed"));
        });
        !s.ok()) {
      return s;
    }
    if (hold && !ctx->HoldWhilePaused()) return absl::OkStatus();
    while (stage_step_ < steps && !ctx->ShouldStop()) {
      auto batch = WaitForBatch(ctx, st.name, n, config_.ppo().drop_zero_variance_groups());
      if (!batch.ok()) return batch.status();
      if (batch->empty()) break;
      StepMetrics bad;
      std::vector<Sample> samples = ToSamples(*batch, &bad);
      std::vector<std::string> ids;
      for (const auto& t : *batch) ids.push_back(t.id());
      auto m = Train(StepKind::kPpo, samples);
      if (!m.ok()) return m.status();
      for (auto& [k, v] : bad) (*m)[k] = v;
      if (auto s = ReplayForCritic(st.name, samples, &*m); !s.ok()) return s;
      if (auto s = Commit(ctx, stage, ids, *m, samples); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // RFT reads the warm-up set.
  auto warmup = ingest_->AcceptedIn("agent_warmup");
  if (!warmup.ok()) return warmup.status();
  std::vector<v1::Trajectory> data;
  StepMetrics filter;
  for (v1::Trajectory& t : *warmup) {
    if (st.kind == Kind::kSft) {
      const RftChoice choice = ChooseForRft(t, r.rft().max_repeated_calls());
      if (!choice.rejection.empty()) {
        filter[choice.dropped_as] += 1;
        continue;
      }
      if (choice.turns < t.turns_size()) {
        filter["rft_cut_broken_tail"] += 1;
        t = RftPrefix(t, choice.turns);
      }
    }
    data.push_back(std::move(t));
  }
  std::vector<Sample> samples = ToSamples(data, &filter);
  filter["stage_trajectories"] = samples.size();
  if (samples.empty()) {
    KLOG(WARNING) << "job " << ctx->job_id() << ": " << st.name << " has no trajectories; skipped";
    return absl::OkStatus();
  }
  const int64_t per_epoch = (static_cast<int64_t>(samples.size()) + n - 1) / n;
  const int64_t total = steps * per_epoch;
  while (stage_step_ < total && !ctx->ShouldStop()) {
    if (!ctx->HoldWhilePaused()) break;
    // By stage_step_, so a resumed job goes on along the same schedule.
    trainer_->actor_optimizer().set_lr(RftLearningRate(r.rft(), stage_step_, total));
    const int64_t b = (stage_step_ % per_epoch) * n;
    std::vector<Sample> batch(samples.begin() + b, samples.begin() + std::min<int64_t>(b + n, samples.size()));
    auto m = Train(StepKind::kSft, batch);
    if (!m.ok()) return m.status();
    for (auto& [k, v] : filter) (*m)[k] = v;
    if (auto s = Commit(ctx, stage, {}, *m, batch); !s.ok()) return s;
  }
  trainer_->actor_optimizer().set_lr(config_.actor_optimizer().lr());
  return absl::OkStatus();
}

absl::Status RecipeRunner::RunValuePretrain(JobContext* ctx, int stage) {
  const v1::ValuePretrainConfig& vp = config_.recipe().value_pretrain();
  const int64_t cap = StageSteps(stage);
  const int n = config_.batch().trajectories_per_step();
  // Warm-up mode: the last quarter of the set is held out (never trained on);
  // fresh mode: each batch is new to the critic, its explained variance is
  // taken on the values before it trains them.
  std::vector<Sample> train, held_out;
  StepMetrics extra;
  const bool imported = vp.import_job_dirs_size() > 0;
  if (vp.use_warmup_trajectories()) {
    auto warmup = ingest_->AcceptedIn("agent_warmup");
    if (!warmup.ok()) return warmup.status();
    std::vector<Sample> all = ToSamples(*warmup, &extra);
    const size_t h = all.size() >= 4 ? all.size() / 4 : 0;
    train.assign(all.begin(), all.end() - h);
    held_out.assign(all.end() - h, all.end());
    if (train.empty()) {
      KLOG(WARNING) << "job " << ctx->job_id() << ": value_pretrain has no warm-up trajectories; skipped";
      return absl::OkStatus();
    }
  } else if (imported) {
    auto all = ImportedReturns(&extra);
    if (!all.ok()) return all.status();
    // Every fourth held out (at most 48): the jobs' and tasks' mix on both sides.
    for (size_t i = 0; i < all->size(); ++i) {
      (i % 4 == 3 && held_out.size() < 48 ? held_out : train).push_back(std::move((*all)[i]));
    }
    KLOG(INFO) << "job " << ctx->job_id() << ": value pretraining on " << train.size() << " imported trajectories, "
               << held_out.size() << " held out";
  }
  const int64_t per_epoch = std::max<int64_t>(1, (static_cast<int64_t>(train.size()) + n - 1) / n);
  const bool stored = vp.use_warmup_trajectories() || imported;
  const int per_update = stored ? std::max(1, vp.batches_per_update()) : 1;
  // The j-th batch of the stored returns, cycling over them.
  auto stored_batch = [&](int64_t j) {
    const int64_t b = (j % per_epoch) * n;
    return std::vector<Sample>(train.begin() + b, train.begin() + std::min<int64_t>(b + n, train.size()));
  };
  while (stage_step_ < cap && !ctx->ShouldStop()) {
    if (!ctx->HoldWhilePaused()) break;
    std::vector<Sample> batch;
    std::vector<std::string> ids;
    StepMetrics bad = extra;
    if (stored) {
      // This update's batches: all but the last train before it.
      const int64_t first = stage_step_ * per_update;
      for (int k = 0; k + 1 < per_update; ++k) {
        if (auto early = Train(StepKind::kValue, stored_batch(first + k)); !early.ok()) return early.status();
      }
      batch = stored_batch(first + per_update - 1);
    } else {
      auto got = WaitForBatch(ctx, kStages[stage].name, n, /*drop_zero_variance=*/false);
      if (!got.ok()) return got.status();
      if (got->empty()) break;
      batch = ToSamples(*got, &bad);
      for (const auto& t : *got) ids.push_back(t.id());
    }
    auto m = Train(StepKind::kValue, batch);
    if (!m.ok()) return m.status();
    (*m)["value_pretrain_batches"] = per_update;
    double ev = (*m)["explained_variance"];  // Fresh batch: the values before this update.
    if (!held_out.empty()) {
      absl::StatusOr<GpuWork> gpu = HoldGpu();
      if (!gpu.ok()) return gpu.status();
      auto values = dp_ != nullptr ? dp_->CriticValues(held_out, trainer_.get()) : trainer_->CriticValues(held_out);
      if (!values.ok()) return values.status();
      std::vector<float> v, ret;
      for (size_t i = 0; i < held_out.size(); ++i) {
        v.insert(v.end(), (*values)[i].begin(), (*values)[i].end());
        ret.insert(ret.end(), (*values)[i].size(), static_cast<float>(held_out[i].reward));
      }
      ev = ExplainedVariance(v, ret);
    }
    (*m)["value_pretrain_heldout_ev"] = ev;
    for (auto& [k, v] : bad) (*m)[k] = v;
    const bool reached = ev >= vp.min_explained_variance();
    if (reached || stage_step_ + 1 >= cap) {
      (*m)[reached ? "value_pretrain_end_ev" : "value_pretrain_end_cap"] = 1;
      KLOG(INFO) << "job " << ctx->job_id() << ": value pretraining ends at step " << stage_step_ + 1
                 << (reached ? ": explained variance " : ": step cap, explained variance ") << ev << " (level "
                 << vp.min_explained_variance() << ")";
    }
    if (auto s = Commit(ctx, stage, ids, *m, batch); !s.ok()) return s;
    if (reached) break;
  }
  return absl::OkStatus();
}

absl::Status RecipeRunner::Run(JobContext* ctx) {
  absl::Status status = RunStages(ctx);
  if (dp_setup_) {  // The other ranks drop their trainers whatever happened here.
    if (auto s = dp_->End(); !s.ok() && status.ok()) status = s;
  }
  return status;
}

absl::Status RecipeRunner::RunStages(JobContext* ctx) {
  if (auto s = Setup(ctx); !s.ok()) return s;
  ctx->SetIngest(ingest_.get());
  absl::Status status = absl::OkStatus();
  for (int stage = static_cast<int>(stage_); stage < kNumStages && status.ok() && !ctx->ShouldStop(); ++stage) {
    if (stage != stage_) stage_step_ = 0;
    stage_ = stage;
    if (StageSteps(stage) == 0) continue;  // Skipped (ablation) or empty.
    status = RunStage(ctx, stage);
    if (status.ok()) status = Flush();  // Each stage ends on a full checkpoint, also when stopped.
  }
  ctx->SetIngest(nullptr);  // Collection stops: no push is in flight after this.
  // Pushes kept arriving after the last update's figures (during its
  // checkpoint): the job ends with what its buffer holds now, untrained.
  const int64_t left = ingest_->Info().buffer_depth;
  auto recorded = ctx->Update([&](v1::Job* j) { (*j->mutable_metrics())["buffer_depth"] = left; });
  return status.ok() ? recorded : status;
}

}  // namespace

std::unique_ptr<JobRunner> MakeRecipeRunner(WeightSink* sink, LearnerMetrics* metrics, DpLeader* dp,
                                            const std::string& gpu_lease_path) {
  return std::make_unique<RecipeRunner>(sink, metrics, dp, gpu_lease_path);
}

double RftLearningRate(const v1::RftConfig& rft, int64_t step, int64_t total) {
  if (rft.min_lr_ratio() <= 0 || total <= 1) return rft.lr();
  const double progress = std::clamp(static_cast<double>(step) / static_cast<double>(total - 1), 0.0, 1.0);
  return rft.lr() * (rft.min_lr_ratio() + (1.0 - rft.min_lr_ratio()) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace kernelrl::learner::rl
