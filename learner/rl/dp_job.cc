#include "learner/rl/dp_job.h"

#include <ATen/cuda/CUDAContext.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/json.h"
#include "common/log.h"
#include "learner/checkpoint.h"
#include "learner/dist/launcher.h"
#include "learner/dist/memory_plan.h"
#include "learner/dist/shard.h"
#include "learner/rl/ingest.h"
#include "learner/rl/job_config.h"
#include "learner/rl/trainer_options.h"

namespace kernelrl::learner::rl {
namespace {

const char* KindName(StepKind k) { return k == StepKind::kPpo ? "ppo" : k == StepKind::kSft ? "sft" : "value"; }

absl::StatusOr<StepMetrics> RunStep(Trainer& t, StepKind kind, const std::vector<Sample>& b, int64_t n) {
  switch (kind) {
    case StepKind::kPpo: return t.PpoStep(b, n);
    case StepKind::kSft: return t.SftStep(b, n);
    default: return t.ValueStep(b, n);
  }
}

absl::StatusOr<std::string> Str(const Json& j, const char* key) { return GetJsonString(j, key, ""); }

}  // namespace

// The job's memory plan (learner/dist/memory_plan.h) against the device:
// ResourceExhausted before any weight is read when it does not fit.
absl::Status CheckJobFits(const v1::LearnerJobConfig& config, const std::string& policy_dir,
                          const std::string& critic_dir, at::Device device) {
  auto actor = ModelConfig::Load(policy_dir + "/config.json");
  if (!actor.ok()) return actor.status();
  auto critic = ModelConfig::Load(critic_dir + "/config.json");
  if (!critic.ok()) return critic.status();
  dist::PlanOptions o;
  o.sharded = false;  // Every rank of a job holds whole models.
  o.tokens = config.batch().max_tokens_per_row();
  o.activation_checkpointing = config.batch().activation_checkpointing();
  o.cuda = device.is_cuda();
  o.device_bytes = device.is_cuda() ? static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem)
                                    : static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const dist::MemoryPlan plan = dist::PlanMemory(*actor, &*critic, o);
  if (auto s = dist::CheckFits(plan); !s.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(s.message(), "\n", plan.Table()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Trainer>> MakeJobTrainer(const v1::LearnerJobConfig& config,
                                                        const std::string& policy_dir, const std::string& critic_dir,
                                                        const std::map<std::string, at::Tensor>& optimizer,
                                                        at::Device device) {
  if (auto s = CheckJobFits(config, policy_dir, critic_dir, device); !s.ok()) return s;
  ModelOptions mo;
  mo.device = device;
  mo.dtype = config.device().dtype() == "float32" || (config.device().dtype().empty() && device.is_cpu())
                 ? at::kFloat
                 : at::kBFloat16;
  mo.trainable = true;
  mo.activation_checkpointing = config.batch().activation_checkpointing();
  auto policy = Transformer::Load(policy_dir, Head::kLanguageModel, mo);
  if (!policy.ok()) return policy.status();
  auto critic = Transformer::Load(critic_dir, Head::kValue, mo);
  if (!critic.ok()) return critic.status();
  const TrainerOptions to = TrainerOptionsFromConfig(config);
  auto trainer = std::make_unique<Trainer>(std::move(*policy), std::move(*critic), to);
  if (!optimizer.empty()) {
    if (auto s = trainer->actor_optimizer().LoadState(optimizer, "actor/"); !s.ok()) return s;
    if (auto s = trainer->critic_optimizer()->LoadState(optimizer, "critic/"); !s.ok()) return s;
    trainer->LoadState(optimizer);
  }
  return trainer;
}

// ---- Rank 0 ----

absl::Status DpLeader::Send(const std::string& json) { return dp_->StoreSet(absl::StrCat("cmd/", seq_++), json); }

absl::Status DpLeader::Setup(const std::string& job_dir, at::Device device, const std::string& policy_dir,
                             const std::string& critic_dir, const std::string& checkpoint_dir,
                             const std::string& hyperparameters_text, Trainer* trainer) {
  if (device.type() != dp_->device().type()) {
    return absl::FailedPreconditionError(absl::StrCat("data-parallel collectives run on ", dp_->device().str(),
                                                      " but the job trains on ", device.str()));
  }
  Json cmd = Json::object({{"op", Json("setup")},
                           {"job_dir", Json(job_dir)},
                           {"device", Json(device.is_cuda() ? "cuda" : "cpu")},
                           {"policy_dir", Json(policy_dir)},
                           {"critic_dir", Json(critic_dir)},
                           {"checkpoint_dir", Json(checkpoint_dir)},
                           {"hyperparameters", Json(hyperparameters_text)}});
  if (auto s = Send(DumpJson(cmd)); !s.ok()) return s;
  trainer->set_collectives(dp_);
  return trainer->BroadcastParameters();
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

absl::Status DpLeader::End() { return Send(R"({"op": "end"})"); }
absl::Status DpLeader::Exit() { return Send(R"({"op": "exit"})"); }

// ---- Ranks 1..N-1 ----

absl::Status RunDpFollower(dist::DataParallel* dp) {
  const int rank = dp->rank();
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
      continue;
    }
    if (*op == "setup") {
      auto text = Str(*cmd, "hyperparameters");
      if (!text.ok()) return text.status();
      auto c = ParseJobConfig(*text);
      if (!c.ok()) return c.status();
      config = *c;
      job_dir = Str(*cmd, "job_dir").value_or("");
      const at::Device device = Str(*cmd, "device").value_or("") == "cuda"
                                    ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank))
                                    : at::Device(at::kCPU);
      std::map<std::string, at::Tensor> optimizer;
      const std::string ckpt = Str(*cmd, "checkpoint_dir").value_or("");
      if (!ckpt.empty()) {
        auto loaded = LoadCheckpoint(ckpt, /*restore_rng=*/false);
        if (!loaded.ok()) return loaded.status();
        optimizer = std::move(loaded->optimizer);
      }
      auto t = MakeJobTrainer(config, Str(*cmd, "policy_dir").value_or(""), Str(*cmd, "critic_dir").value_or(""),
                              optimizer, device);
      if (!t.ok()) return t.status();
      trainer = std::move(*t);
      trainer->set_collectives(dp);
      if (auto s = trainer->BroadcastParameters(); !s.ok()) return s;
      KLOG(INFO) << "data-parallel rank " << rank << ": trainer for " << job_dir << " on " << device.str();
      continue;
    }
    if (*op != "step" || trainer == nullptr) return absl::InternalError(absl::StrCat("rank ", rank, ": bad command ", *msg));
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
    const Json& my_baselines = (*baselines)[rank];
    std::vector<Sample> batch;
    for (size_t k = 0; k < ids.size(); ++k) {
      const Json& id = ids[k];
      auto bytes = ReadFileToString(Ingest::TrajectoryFile(job_dir, id.get<std::string>()));
      if (!bytes.ok()) return bytes.status();
      v1::Trajectory t;
      if (!t.ParseFromString(*bytes)) return absl::DataLossError(absl::StrCat("trajectory ", id.get<std::string>(), " does not parse"));
      auto s = SampleFromTrajectory(t, trainer->policy().config().vocab_size, config.batch().max_trajectory_tokens());
      if (!s.ok()) return s.status();
      s->baseline = JsonNumber(my_baselines[k]);
      batch.push_back(std::move(*s));
    }
    const std::string objective = Str(*cmd, "objective").value_or("");
    const StepKind kind = objective == "ppo" ? StepKind::kPpo : objective == "sft" ? StepKind::kSft : StepKind::kValue;
    trainer->actor_optimizer().set_lr(GetJsonDouble(*cmd, "actor_lr", trainer->actor_optimizer().lr()).value_or(0));
    auto m = RunStep(*trainer, kind, batch, GetJsonInt(*cmd, "n", 0).value_or(0));
    if (!m.ok()) return m.status();
  }
}

}  // namespace kernelrl::learner::rl
