#include "learner/rl/dp_job.h"

#include <ATen/cuda/CUDAContext.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/json.h"
#include "common/log.h"
#include "learner/checkpoint.h"
#include "learner/dist/fsdp.h"
#include "learner/dist/memory_plan.h"
#include "learner/dist/shard.h"
#include "learner/dist/sharded_checkpoint.h"
#include "learner/rl/ingest.h"
#include "learner/rl/job_config.h"
#include "learner/rl/trainer_options.h"
#include "learner/sync/collective_weight_sync.h"

namespace kernelrl::learner::rl {
namespace {

const char* KindName(StepKind k) {
  switch (k) {
    case StepKind::kPpo: return "ppo";
    case StepKind::kSft: return "sft";
    case StepKind::kCriticReplay: return "critic_replay";
    default: return "value";
  }
}

StepKind KindOf(const std::string& name) {
  for (StepKind k : {StepKind::kPpo, StepKind::kSft, StepKind::kCriticReplay}) {
    if (name == KindName(k)) return k;
  }
  return StepKind::kValue;
}


absl::StatusOr<std::string> Str(const Json& j, const char* key) { return GetJsonString(j, key, ""); }

std::vector<dist::ShardedModelRef> ShardedRefs(Trainer& t) {
  std::vector<dist::ShardedModelRef> refs = {
      {"actor", dynamic_cast<dist::ShardedWeights*>(t.policy().weight_provider()), &t.actor_optimizer()}};
  if (t.critic() != nullptr) {
    refs.push_back({"critic", dynamic_cast<dist::ShardedWeights*>(t.critic()->weight_provider()), t.critic_optimizer()});
  }
  return refs;
}

// Every rank: its shards into `dir`, then the consolidation of both models
// (collective; only `keep` (rank 0) holds them).
absl::StatusOr<DpLeader::Consolidated> SaveAndConsolidate(const std::string& dir, Trainer& t, bool keep) {
  const std::vector<dist::ShardedModelRef> refs = ShardedRefs(t);
  for (const auto& r : refs) {
    if (r.weights == nullptr) return absl::FailedPreconditionError("save: the " + r.name + " is not sharded");
  }
  if (auto s = dist::SaveShards(dir, refs); !s.ok()) return s;
  DpLeader::Consolidated out;
  for (const auto& r : refs) {
    auto m = r.weights->Consolidate(keep);
    if (!m.ok()) return m.status();
    (r.name == "actor" ? out.policy : out.critic) = std::move(*m);
  }
  return out;
}

// The samples of trajectory files `ids` of the job.
absl::StatusOr<std::vector<Sample>> ReadSamples(const std::string& job_dir, const Json& ids, Trainer& t,
                                                const v1::LearnerJobConfig& config) {
  std::vector<Sample> batch;
  for (const Json& id : ids) {
    auto tr = Ingest::ReadTrajectory(job_dir, id.get<std::string>());
    if (!tr.ok()) return tr.status();
    auto s = SampleFromTrajectory(*tr, t.policy().config().vocab_size, config.batch().max_trajectory_tokens());
    if (!s.ok()) return s.status();
    batch.push_back(std::move(*s));
  }
  return batch;
}

}  // namespace

absl::StatusOr<StepMetrics> RunStep(Trainer& t, StepKind kind, const std::vector<Sample>& b, int64_t n) {
  switch (kind) {
    case StepKind::kPpo: return t.PpoStep(b, n);
    case StepKind::kSft: return t.SftStep(b, n);
    case StepKind::kCriticReplay: return t.CriticReplayStep(b, n);
    default: return t.ValueStep(b, n);
  }
}

// The job's memory plan (learner/dist/memory_plan.h) against the device:
// ResourceExhausted before any weight is read when it does not fit.
absl::Status CheckJobFits(const v1::LearnerJobConfig& config, const std::string& policy_dir,
                          const std::string& critic_dir, at::Device device, int shard_world) {
  auto actor = ModelConfig::Load(policy_dir + "/config.json");
  if (!actor.ok()) return actor.status();
  auto critic = ModelConfig::Load(critic_dir + "/config.json");
  if (!critic.ok()) return critic.status();
  dist::PlanOptions o;
  o.sharded = shard_world > 0;  // Else every rank holds whole models.
  o.world_size = std::max(1, shard_world);
  o.tokens = config.batch().max_tokens_per_row();
  o.activation_checkpointing = config.batch().activation_checkpointing();
  o.offload_activations = config.batch().offload_activations();
  o.actor_lora_rank = config.actor_lora().rank();
  o.critic_lora_rank = config.critic_lora().rank();
  o.cuda = device.is_cuda();
  // A host's ranks (one per GPU) share its memory: each may pin its share of 3/4 of it.
  const int64_t host = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  o.host_limit_bytes = device.is_cuda() ? host * 3 / 4 / std::max<int64_t>(1, at::cuda::device_count()) : 0;
  o.device_bytes = device.is_cuda() ? static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem)
                                    : static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const dist::MemoryPlan plan = dist::PlanMemory(*actor, &*critic, o);
  if (auto s = dist::CheckFits(plan); !s.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(s.message(), "\n", plan.Table()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobSharding>> MakeJobSharding(dist::DataParallel* world,
                                                             v1::DistributedConfig::Sharding mode, int ranks_per_host,
                                                             const std::string& job) {
  auto out = std::make_unique<JobSharding>();
  out->mode = mode;
  out->world = world;
  if (mode != v1::DistributedConfig::HYBRID_SHARD) return out;
  const int w = world->world_size(), r = world->rank();
  if (ranks_per_host < 1 || w % ranks_per_host != 0) {
    return absl::InvalidArgumentError(absl::StrCat("HYBRID_SHARD: ", w, " ranks are not hosts of ", ranks_per_host));
  }
  const int host = r / ranks_per_host, local = r % ranks_per_host;
  // Each rank joins its own shard group, then its own replicate group: a
  // group's rendezvous waits for its members only, so no rank makes the others'.
  std::vector<int> shard, replicas;
  for (int l = 0; l < ranks_per_host; ++l) shard.push_back(host * ranks_per_host + l);
  for (int h = 0; h < w / ranks_per_host; ++h) replicas.push_back(h * ranks_per_host + local);
  auto s = world->Subgroup(absl::StrCat(job, "/host", host), shard);
  if (!s.ok()) return s.status();
  out->shard_group = std::move(*s);
  auto rep = world->Subgroup(absl::StrCat(job, "/replica", local), replicas);
  if (!rep.ok()) return rep.status();
  out->replicate_group = std::move(*rep);
  return out;
}

absl::StatusOr<std::unique_ptr<Trainer>> MakeJobTrainer(const v1::LearnerJobConfig& config,
                                                        const std::string& policy_dir, const std::string& critic_dir,
                                                        const std::map<std::string, at::Tensor>& optimizer,
                                                        at::Device device, const JobSharding* sharding,
                                                        const std::string& checkpoint_dir) {
  const bool sharded = sharding != nullptr && sharding->sharded();
  if (sharded && config.ppo().kl_ref_coef() > 0) {  // Refused at the job's start, not at its first PPO update.
    return absl::FailedPreconditionError(
        "ppo.kl_ref_coef needs an actor that is not sharded (the KL reference is a whole copy of it); "
        "set distributed.sharding REPLICATE or kl_ref_coef 0");
  }
  dist::DataParallel* shard_group =
      !sharded ? nullptr : sharding->shard_group != nullptr ? sharding->shard_group.get() : sharding->world;
  if (auto s = CheckJobFits(config, policy_dir, critic_dir, device, sharded ? shard_group->world_size() : 0); !s.ok()) {
    return s;
  }
  const std::string shards_dir = checkpoint_dir.empty() ? "" : checkpoint_dir + "/shards";
  if (!checkpoint_dir.empty() && sharded != std::filesystem::exists(shards_dir)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", checkpoint_dir, sharded ? " has no shards/: it was written by a replicated job"
                                                            : " holds shards/: it was written by a sharded job",
                     "; resume it with the sharding it was written with (DistributedConfig.sharding)"));
  }
  ModelOptions mo;
  mo.device = device;
  mo.dtype = config.device().dtype() == "float32" || (config.device().dtype().empty() && device.is_cpu())
                 ? at::kFloat
                 : at::kBFloat16;
  mo.trainable = true;
  mo.activation_checkpointing = config.batch().activation_checkpointing();
  mo.offload_activations = config.batch().offload_activations();
  ModelOptions load = mo;
  if (sharded) load.device = at::kCPU, load.dtype = at::kFloat;  // Exact fp32 masters, then only the shard moves.
  TrainerOptions to = TrainerOptionsFromConfig(config);
  if (sharded) dist::UseShardedModels(&to);
  // Sharded, each model is cut as soon as it is read: one whole model on the host at a time.
  auto read = [&](const std::string& dir, Head head) -> absl::StatusOr<std::unique_ptr<Transformer>> {
    const v1::LoraConfig& lora = head == Head::kValue ? config.critic_lora() : config.actor_lora();
    ModelOptions options = load;
    options.lora_rank = lora.rank();
    options.lora_alpha = lora.alpha();
    options.lora_seed = config.seed() + (head == Head::kValue ? 1 : 0);  // Fresh adapters' draw.
    auto m = Transformer::Load(dir, head, options);
    if (!m.ok() || !sharded) return m;
    auto replicate = sharding->replicate_group != nullptr ? sharding->replicate_group->backend()
                                                          : c10::intrusive_ptr<c10d::Backend>();
    auto sw = dist::ShardedWeights::Shard(**m, shard_group->backend(), device, mo.dtype, replicate);
    if (!sw.ok()) return sw.status();
    return m;
  };
  auto policy = read(policy_dir, Head::kLanguageModel);
  if (!policy.ok()) return policy.status();
  auto critic = read(critic_dir, Head::kValue);
  if (!critic.ok()) return critic.status();
  auto trainer = std::make_unique<Trainer>(std::move(*policy), std::move(*critic), to);
  if (!optimizer.empty()) {
    if (!sharded) {
      if (auto s = trainer->actor_optimizer().LoadState(optimizer, "actor/"); !s.ok()) return s;
      if (auto s = trainer->critic_optimizer()->LoadState(optimizer, "critic/"); !s.ok()) return s;
    }
    if (auto s = trainer->LoadState(optimizer); !s.ok()) return s;
  }
  if (sharded && !shards_dir.empty()) {
    if (auto s = dist::LoadShards(shards_dir, ShardedRefs(*trainer)); !s.ok()) return s;
  }
  return trainer;
}

// ---- Rank 0 ----

absl::Status DpLeader::Send(const std::string& json) { return dp_->StoreSet(absl::StrCat("cmd/", seq_++), json); }

absl::StatusOr<std::unique_ptr<Trainer>> DpLeader::Setup(const std::string& job_dir, at::Device device,
                                                         const std::string& policy_dir, const std::string& critic_dir,
                                                         const std::string& checkpoint_dir,
                                                         const std::string& hyperparameters_text,
                                                         const std::map<std::string, at::Tensor>& optimizer) {
  if (device.type() != dp_->device().type()) {
    return absl::FailedPreconditionError(absl::StrCat("data-parallel collectives run on ", dp_->device().str(),
                                                      " but the job trains on ", device.str()));
  }
  auto config = ParseJobConfig(hyperparameters_text);
  if (!config.ok()) return config.status();
  const std::string groups = absl::StrCat("job", jobs_++);
  Json cmd = Json::object({{"op", Json("setup")},
                           {"job_dir", Json(job_dir)},
                           {"device", Json(device.is_cuda() ? "cuda" : "cpu")},
                           {"policy_dir", Json(policy_dir)},
                           {"critic_dir", Json(critic_dir)},
                           {"checkpoint_dir", Json(checkpoint_dir)},
                           {"hyperparameters", Json(hyperparameters_text)},
                           {"sharding", Json(static_cast<int64_t>(group_.mode))},
                           {"ranks_per_host", Json(static_cast<int64_t>(group_.ranks_per_host))},
                           {"groups", Json(groups)}});
  if (auto s = Send(DumpJson(cmd)); !s.ok()) return s;
  auto sharding = MakeJobSharding(dp_, group_.mode, group_.ranks_per_host, groups);
  if (!sharding.ok()) return sharding.status();
  job_ = std::move(*sharding);
  auto trainer = MakeJobTrainer(*config, policy_dir, critic_dir, optimizer, device, job_.get(), checkpoint_dir);
  if (!trainer.ok()) return trainer.status();
  (*trainer)->set_collectives(dp_);
  if (auto s = (*trainer)->BroadcastParameters(); !s.ok()) return s;  // Replicated models only.
  return trainer;
}

absl::StatusOr<std::vector<Sample>> DpLeader::Step(StepKind kind, const std::vector<Sample>& batch,
                                                    double actor_lr) {
  std::vector<int64_t> tokens;
  for (const Sample& s : batch) tokens.push_back(static_cast<int64_t>(s.ids.size()));
  const std::vector<std::vector<int>> shards = dist::ShardByTokens(tokens, dp_->world_size());
  Json list = Json::array(), baselines = Json::array();
  for (const auto& shard : shards) {
    Json ids = Json::array(), b = Json::array();
    for (int i : shard) ids.push_back(Json(batch[i].id)), b.push_back(Json(batch[i].baseline));
    list.push_back(std::move(ids));
    baselines.push_back(std::move(b));
  }
  Json cmd = Json::object({{"op", Json("step")},
                           {"objective", Json(KindName(kind))},
                           {"n", Json(static_cast<int64_t>(batch.size()))},
                           {"actor_lr", Json(actor_lr)},
                           {"shards", std::move(list)},
                           {"baselines", std::move(baselines)}});
  if (auto s = Send(DumpJson(cmd)); !s.ok()) return s;
  std::vector<Sample> mine;
  for (int i : shards[0]) mine.push_back(batch[i]);
  return mine;
}

absl::StatusOr<DpLeader::Consolidated> DpLeader::Save(const std::string& dir, Trainer* trainer) {
  if (!sharded()) return absl::FailedPreconditionError("save: the job's models are not sharded");
  if (auto s = RemoveTree(dir); !s.ok()) return s;  // A crashed save's files.
  if (auto s = MakeDir(dir, 0755); !s.ok()) return s;
  if (auto s = Send(DumpJson(Json::object({{"op", Json("save")}, {"dir", Json(dir)}}))); !s.ok()) return s;
  auto out = SaveAndConsolidate(dir, *trainer, /*keep=*/true);
  if (!out.ok()) return out.status();
  if (auto s = dp_->Barrier(); !s.ok()) return s;  // Every rank's shard file has landed.
  return out;
}

absl::StatusOr<std::unique_ptr<Transformer>> DpLeader::ExportPolicy(Trainer* trainer) {
  auto* sw = dynamic_cast<dist::ShardedWeights*>(trainer->policy().weight_provider());
  if (!sharded() || sw == nullptr) return absl::FailedPreconditionError("export: the policy is not sharded");
  if (auto s = Send(R"({"op": "export"})"); !s.ok()) return s;
  return sw->Consolidate(/*keep=*/true);
}

absl::Status DpLeader::PublishShards(Trainer* trainer, WeightSink* sink, int64_t version) {
  auto* sw = dynamic_cast<dist::ShardedWeights*>(trainer->policy().weight_provider());
  if (!sharded() || sw == nullptr) return absl::FailedPreconditionError("send_weights: the policy is not sharded");
  const std::string cmd = DumpJson(Json::object({{"op", Json("send_weights")}, {"version", Json(version)}}));
  if (auto s = Send(cmd); !s.ok()) return s;
  return sink->PublishShards(*sw, version);
}

absl::StatusOr<std::vector<std::vector<float>>> DpLeader::CriticValues(const std::vector<Sample>& batch,
                                                                       Trainer* trainer) {
  if (sharded()) {
    Json ids = Json::array();
    for (const Sample& s : batch) ids.push_back(Json(s.id));
    if (auto s = Send(DumpJson(Json::object({{"op", Json("values")}, {"ids", std::move(ids)}}))); !s.ok()) return s;
  }
  return trainer->CriticValues(batch);
}

absl::Status DpLeader::End() {
  job_.reset();
  return Send(R"({"op": "end"})");
}
absl::Status DpLeader::Exit() { return Send(R"({"op": "exit"})"); }

// ---- Ranks 1..N-1 ----

absl::Status RunDpFollower(dist::DataParallel* dp) {
  const int rank = dp->rank();
  std::unique_ptr<JobSharding> sharding;
  std::unique_ptr<Trainer> trainer;
  v1::LearnerJobConfig config;
  std::string job_dir;
  for (int64_t seq = 0;; ++seq) {
    absl::StatusOr<std::string> msg;
    do {  // An idle learner sends nothing for hours: wait in slices.
      msg = dp->StoreGet(absl::StrCat("cmd/", seq), absl::Hours(1));
    } while (absl::IsDeadlineExceeded(msg.status()));
    if (!msg.ok()) return msg.status();
    auto cmd = ParseJson(*msg);
    if (!cmd.ok()) return cmd.status();
    auto op = Str(*cmd, "op");
    if (!op.ok()) return op.status();
    if (*op == "exit") return absl::OkStatus();
    if (*op == "end") {
      trainer.reset();
      sharding.reset();
      continue;
    }
    if (*op == "setup") {
      auto text = Str(*cmd, "hyperparameters");
      if (!text.ok()) return text.status();
      auto c = ParseJobConfig(*text);
      if (!c.ok()) return c.status();
      config = *c;
      job_dir = Str(*cmd, "job_dir").value_or("");
      const at::Device device = Str(*cmd, "device").value_or("") == "cuda" ? dp->device() : at::Device(at::kCPU);
      const auto mode = static_cast<v1::DistributedConfig::Sharding>(GetJsonInt(*cmd, "sharding", 0).value_or(0));
      auto sh = MakeJobSharding(dp, mode, static_cast<int>(GetJsonInt(*cmd, "ranks_per_host", 1).value_or(1)),
                                Str(*cmd, "groups").value_or(""));
      if (!sh.ok()) return sh.status();
      sharding = std::move(*sh);
      std::map<std::string, at::Tensor> optimizer;
      const std::string ckpt = Str(*cmd, "checkpoint_dir").value_or("");
      if (!ckpt.empty()) {
        auto loaded = LoadCheckpoint(ckpt, /*restore_rng=*/false);
        if (!loaded.ok()) return loaded.status();
        optimizer = std::move(loaded->optimizer);
      }
      auto t = MakeJobTrainer(config, Str(*cmd, "policy_dir").value_or(""), Str(*cmd, "critic_dir").value_or(""),
                              optimizer, device, sharding.get(), ckpt);
      if (!t.ok()) return t.status();
      trainer = std::move(*t);
      trainer->set_collectives(dp);
      if (auto s = trainer->BroadcastParameters(); !s.ok()) return s;
      KLOG(INFO) << "data-parallel rank " << rank << ": trainer for " << job_dir << " on " << device.str()
                 << (sharding->sharded() ? " (sharded)" : "");
      continue;
    }
    if (trainer == nullptr) return absl::InternalError(absl::StrCat("rank ", rank, ": ", *op, " before setup"));
    if (*op == "save") {
      auto saved = SaveAndConsolidate(Str(*cmd, "dir").value_or(""), *trainer, /*keep=*/false);
      if (!saved.ok()) return saved.status();
      if (auto s = dp->Barrier(); !s.ok()) return s;
      continue;
    }
    if (*op == "export") {
      auto* sw = dynamic_cast<dist::ShardedWeights*>(trainer->policy().weight_provider());
      if (sw == nullptr) return absl::InternalError(absl::StrCat("rank ", rank, ": export of a policy not sharded"));
      if (auto m = sw->Consolidate(/*keep=*/false); !m.ok()) return m.status();
      continue;
    }
    if (*op == "send_weights") {
      auto* sw = dynamic_cast<dist::ShardedWeights*>(trainer->policy().weight_provider());
      if (sw == nullptr) return absl::InternalError(absl::StrCat("rank ", rank, ": send_weights of a policy not sharded"));
      if (sw->replica() != 0) continue;  // Hybrid: only rank 0's shard group gathers for it.
      auto version = GetJsonInt(*cmd, "version", -1);
      if (!version.ok() || *version < 0) {
        return absl::InternalError(absl::StrCat("rank ", rank, ": send_weights without a version"));
      }
      if (auto s = SendWeights(*sw, /*sync=*/nullptr, *version); !s.ok()) return s;
      continue;
    }
    if (*op == "values") {
      const Json* ids = FindJson(*cmd, "ids");
      if (ids == nullptr || !ids->is_array()) return absl::InternalError(absl::StrCat("rank ", rank, ": values without ids"));
      auto batch = ReadSamples(job_dir, *ids, *trainer, config);
      if (!batch.ok()) return batch.status();
      if (auto v = trainer->CriticValues(*batch); !v.ok()) return v.status();
      continue;
    }
    if (*op != "step") return absl::InternalError(absl::StrCat("rank ", rank, ": bad command ", *msg));
    const Json* shards = FindJson(*cmd, "shards");
    if (shards == nullptr || !shards->is_array() || static_cast<int>(shards->size()) <= rank) {
      return absl::InternalError(absl::StrCat("rank ", rank, ": step without a shard for it"));
    }
    const Json* baselines = FindJson(*cmd, "baselines");
    const Json& ids = (*shards)[rank];
    if (baselines == nullptr || !baselines->is_array() || static_cast<int>(baselines->size()) <= rank ||
        (*baselines)[rank].size() != ids.size()) {
      return absl::InternalError(absl::StrCat("rank ", rank, ": step without a baseline per trajectory"));
    }
    auto batch = ReadSamples(job_dir, ids, *trainer, config);
    if (!batch.ok()) return batch.status();
    for (size_t k = 0; k < batch->size(); ++k) (*batch)[k].baseline = JsonNumber((*baselines)[rank][k]);
    const std::string objective = Str(*cmd, "objective").value_or("");
    const StepKind kind = KindOf(objective);
    trainer->actor_optimizer().set_lr(GetJsonDouble(*cmd, "actor_lr", trainer->actor_optimizer().lr()).value_or(0));
    auto m = RunStep(*trainer, kind, *batch, GetJsonInt(*cmd, "n", 0).value_or(0));
    if (!m.ok()) return m.status();
  }
}

}  // namespace kernelrl::learner::rl
