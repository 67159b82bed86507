#include "learner/rl/job_config.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config.h"
#include "common/file.h"
#include "data/dataset.h"
#include "learner/model_config.h"
#include "google/protobuf/util/json_util.h"

namespace kernelrl::learner::rl {

const char kJobConfigDefaults[] = R"pb(
  ppo {
    clip_low: 0.2 clip_high: 0.28 gamma: 1.0 lambda: 0.95 temperature: 1.0 entropy_metric: true
    lambda_critic: 1.0 lambda_length_alpha: 0.05 dual_clip: 3.0
    mismatch_low: 0.5 mismatch_high: 2.0 mismatch_mask: TOKEN aggregation: TRAJECTORY_MEAN epochs: 1 minibatches: 1
  }
  actor_optimizer {
    lr: 3e-6 beta1: 0.9 beta2: 0.999 eps: 1e-8 weight_decay: 0.01 max_grad_norm: 1.0
    warmup_steps: 0 decay_steps: 0 min_lr_ratio: 0.1 head_lr_scale: 1
  }
  critic_optimizer {
    lr: 6e-6 beta1: 0.9 beta2: 0.999 eps: 1e-8 weight_decay: 0.01 max_grad_norm: 1.0
    warmup_steps: 0 decay_steps: 0 min_lr_ratio: 0.1 head_lr_scale: 10
  }
  batch { trajectories_per_step: 64 max_tokens_per_row: 32768 max_trajectory_tokens: 131072 activation_checkpointing: true }
  ingest { max_policy_lag: 1 buffer_capacity: 4096 lease_timeout_seconds: 1800 max_infra_reruns: 2 shuffle_tasks: true }
  recipe {
    single_turn_ppo { steps: 50 max_turns: 1 }
    agent_warmup { steps: 1024 max_turns: 150 }
    rft { epochs: 1 max_repeated_calls: 3 lr: 1e-5 }
    value_pretrain { steps: 50 min_explained_variance: 0.3 }
    agentic_ppo { steps: 150 max_turns: 150 }
  }
  checkpoint { keep_last: 3 }
  seed: 1
)pb";

namespace {

absl::Status Field(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("spec.hyperparameters_text: ", field, " ", problem));
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status CheckOptimizer(const std::string& name, const v1::OptimizerConfig& o) {
  if (!(o.lr() > 0 && o.lr() < 1)) return Field(name + ".lr", "must be in (0, 1)");
  if (!(o.beta1() >= 0 && o.beta1() < 1)) return Field(name + ".beta1", "must be in [0, 1)");
  if (!(o.beta2() >= 0 && o.beta2() < 1)) return Field(name + ".beta2", "must be in [0, 1)");
  if (!(o.eps() > 0)) return Field(name + ".eps", "must be > 0");
  if (o.weight_decay() < 0) return Field(name + ".weight_decay", "must be >= 0");
  if (o.max_grad_norm() < 0) return Field(name + ".max_grad_norm", "must be >= 0");
  if (o.warmup_steps() < 0) return Field(name + ".warmup_steps", "must be >= 0");
  if (o.decay_steps() < 0) return Field(name + ".decay_steps", "must be >= 0");
  if (!(o.min_lr_ratio() >= 0 && o.min_lr_ratio() <= 1)) return Field(name + ".min_lr_ratio", "must be in [0, 1]");
  if (!(o.head_lr_scale() > 0)) return Field(name + ".head_lr_scale", "must be > 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::LearnerJobConfig> ParseJobConfig(const std::string& text) {
  v1::LearnerJobConfig c;
  if (auto s = MergeTextConfig(kJobConfigDefaults, "job config defaults", &c); !s.ok()) return s;
  if (auto s = MergeTextConfig(text, "spec.hyperparameters_text", &c); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  const auto& p = c.ppo();
  if (!(p.clip_low() > 0 && p.clip_low() < 1)) return Field("ppo.clip_low", "must be in (0, 1)");
  if (!(p.clip_high() > 0)) return Field("ppo.clip_high", "must be > 0");
  if (!(p.gamma() > 0 && p.gamma() <= 1)) return Field("ppo.gamma", "must be in (0, 1]");
  if (!(p.lambda() >= 0 && p.lambda() <= 1)) return Field("ppo.lambda", "must be in [0, 1]");
  if (!(p.entropy_coef() >= 0 && p.entropy_coef() < 1)) return Field("ppo.entropy_coef", "must be in [0, 1)");
  if (!(p.kl_ref_coef() >= 0)) return Field("ppo.kl_ref_coef", "must be >= 0 (0 = off)");
  if (!(p.lambda_critic() >= 0 && p.lambda_critic() <= 1)) return Field("ppo.lambda_critic", "must be in [0, 1]");
  if (p.lambda_length_alpha() < 0) return Field("ppo.lambda_length_alpha", "must be >= 0 (0 = the fixed lambda)");
  if (p.dual_clip() != 0 && !(p.dual_clip() > 1)) return Field("ppo.dual_clip", "must be 0 (off) or > 1");
  if (!(p.mismatch_low() >= 0 && p.mismatch_low() < 1)) return Field("ppo.mismatch_low", "must be in [0, 1)");
  if (!(p.mismatch_high() > 1)) return Field("ppo.mismatch_high", "must be > 1");
  if (p.epochs() < 1) return Field("ppo.epochs", "must be >= 1");
  if (p.minibatches() < 1) return Field("ppo.minibatches", "must be >= 1");
  if (p.critic_epochs() != 0 && p.critic_epochs() < p.epochs()) {
    return Field("ppo.critic_epochs", "must be 0 (= epochs) or >= epochs");
  }
  if (p.critic_replay_batches() < 0) return Field("ppo.critic_replay_batches", "must be >= 0 (0 or 1: off)");
  if (p.minibatches() > c.batch().trajectories_per_step()) {
    return Field("ppo.minibatches", "must be <= batch.trajectories_per_step");
  }
  if (!(p.temperature() > 0)) return Field("ppo.temperature", "must be > 0");
  if (auto s = CheckOptimizer("actor_optimizer", c.actor_optimizer()); !s.ok()) return s;
  if (auto s = CheckOptimizer("critic_optimizer", c.critic_optimizer()); !s.ok()) return s;
  const auto& b = c.batch();
  if (b.trajectories_per_step() < 1) return Field("batch.trajectories_per_step", "must be >= 1");
  if (b.max_tokens_per_row() < 16) return Field("batch.max_tokens_per_row", "must be >= 16");
  if (b.max_trajectory_tokens() < 2) return Field("batch.max_trajectory_tokens", "must be >= 2");
  if (b.offload_activations() && !b.activation_checkpointing()) {
    return Field("batch.offload_activations", "needs batch.activation_checkpointing (it offloads the checkpointed inputs)");
  }
  const auto& in = c.ingest();
  if (in.max_policy_lag() < 0) return Field("ingest.max_policy_lag", "must be >= 0");
  if (in.buffer_capacity() < b.trajectories_per_step()) {
    return Field("ingest.buffer_capacity", "must hold at least batch.trajectories_per_step trajectories");
  }
  if (!(in.lease_timeout_seconds() > 0)) return Field("ingest.lease_timeout_seconds", "must be > 0");
  if (in.max_infra_reruns() < 0) return Field("ingest.max_infra_reruns", "must be >= 0");
  const auto& r = c.recipe();
  for (const auto& [name, stage] : {std::pair{"single_turn_ppo", &r.single_turn_ppo()},
                                    {"agent_warmup", &r.agent_warmup()},
                                    {"agentic_ppo", &r.agentic_ppo()}}) {
    if (stage->steps() < 0) return Field(absl::StrCat("recipe.", name, ".steps"), "must be >= 0");
    if (stage->max_turns() < 0) return Field(absl::StrCat("recipe.", name, ".max_turns"), "must be >= 0");
  }
  if (r.rft().epochs() < 0) return Field("recipe.rft.epochs", "must be >= 0");
  if (r.rft().max_repeated_calls() < 1) return Field("recipe.rft.max_repeated_calls", "must be >= 1");
  if (!(r.rft().lr() > 0 && r.rft().lr() < 1)) return Field("recipe.rft.lr", "must be in (0, 1)");
  if (!(r.rft().min_lr_ratio() >= 0 && r.rft().min_lr_ratio() <= 1)) {
    return Field("recipe.rft.min_lr_ratio", "must be in [0, 1]");
  }
  if (!r.rft().skip() && r.agent_warmup().skip()) {
    return Field("recipe.rft.skip", "RFT needs the agent_warmup trajectories (skip both or neither)");
  }
  const auto& vp = r.value_pretrain();
  if (vp.steps() < 0) return Field("recipe.value_pretrain.steps", "must be >= 0");
  if (vp.max_turns() < 0) return Field("recipe.value_pretrain.max_turns", "must be >= 0");
  if (vp.min_explained_variance() > 1) return Field("recipe.value_pretrain.min_explained_variance", "must be <= 1");
  if (vp.use_warmup_trajectories() && vp.import_job_dirs_size() > 0) {
    return Field("recipe.value_pretrain.import_job_dirs", "not with use_warmup_trajectories (one source of returns)");
  }
  if (vp.batches_per_update() < 0) return Field("recipe.value_pretrain.batches_per_update", "must be >= 0");
  if (vp.batches_per_update() > 1 && !vp.use_warmup_trajectories() && vp.import_job_dirs_size() == 0) {
    return Field("recipe.value_pretrain.batches_per_update",
                 "more than 1 needs stored returns (use_warmup_trajectories or import_job_dirs): a fresh batch trains once");
  }
  for (const std::string& d : vp.import_job_dirs()) {
    if (d.empty()) return Field("recipe.value_pretrain.import_job_dirs", "an empty directory name");
  }
  if (!vp.skip() && vp.use_warmup_trajectories() && r.agent_warmup().skip()) {
    return Field("recipe.value_pretrain.skip", "value pretraining on warm-up trajectories needs agent_warmup");
  }
  const std::string& dev = c.device().device();
  if (!dev.empty() && dev != "cpu" && dev != "cuda" && dev.rfind("cuda:", 0) != 0) {
    return Field("device.device", "must be cpu, cuda or cuda:N");
  }
  const std::string& dt = c.device().dtype();
  if (!dt.empty() && dt != "float32" && dt != "bfloat16") return Field("device.dtype", "must be float32 or bfloat16");
  for (const auto& [name, lora] : {std::pair{"actor_lora", &c.actor_lora()}, {"critic_lora", &c.critic_lora()}}) {
    if (lora->rank() < 0) return Field(absl::StrCat(name, ".rank"), "must be >= 0 (0: full training)");
    if (lora->alpha() < 0) return Field(absl::StrCat(name, ".alpha"), "must be >= 0 (0: 2 x rank)");
  }
  if (c.checkpoint().keep_last() < 1) return Field("checkpoint.keep_last", "must be >= 1");
  if (c.checkpoint().full_every() < 0) return Field("checkpoint.full_every", "must be >= 1 (0: 1)");
  return c;
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  auto bad = [](const std::string& field, const std::string& problem) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", field, ": ", problem));
  };
  if (spec.base_checkpoint().empty()) return bad("base_checkpoint", "required (a Hugging Face checkpoint directory)");
  if (!IsDir(spec.base_checkpoint())) return bad("base_checkpoint", spec.base_checkpoint() + " is not a directory");
  if (!ReadFileToString(spec.base_checkpoint() + "/config.json").ok()) {
    return bad("base_checkpoint", spec.base_checkpoint() + " has no readable config.json");
  }
  if (!spec.critic_checkpoint().empty()) {
    auto actor = ModelConfig::Load(spec.base_checkpoint() + "/config.json");
    if (!actor.ok()) return bad("base_checkpoint", std::string(actor.status().message()));
    auto critic = ModelConfig::Load(spec.critic_checkpoint() + "/config.json");
    if (!critic.ok()) return bad("critic_checkpoint", std::string(critic.status().message()));
    if (critic->vocab_size != actor->vocab_size) {
      return bad("critic_checkpoint", absl::StrCat("vocab_size ", critic->vocab_size, " but the actor's is ",
                                                   actor->vocab_size, ": the critic reads the actor's tokens"));
    }
  }
  if (spec.task_set().empty()) return bad("task_set", "required (a JSON-lines file of kernelrl.v1.Task)");
  auto tasks = LoadTaskSet(spec.task_set());
  if (!tasks.ok()) return bad("task_set", std::string(tasks.status().message()));
  if (tasks->empty()) return bad("task_set", spec.task_set() + " holds no tasks");
  if (spec.max_steps() < 0) return bad("max_steps", "must be >= 0 (0 = the recipe's step counts)");
  if (spec.rollouts_per_task() < 0) return bad("rollouts_per_task", "must be >= 0 (0 = 1)");
  auto config = ParseJobConfig(spec.hyperparameters_text());
  if (!config.ok()) return config.status();
  for (const std::string& id : config->ingest().deferred_task_ids()) {
    if (std::none_of(tasks->begin(), tasks->end(), [&](const v1::Task& t) { return t.id() == id; })) {
      return bad("hyperparameters_text", absl::StrCat("ingest.deferred_task_ids: \"", id, "\" is not a task of ",
                                                      spec.task_set()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Task>> LoadTaskSet(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::vector<v1::Task> tasks;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    v1::Task t;
    auto s = google::protobuf::util::JsonStringToMessage(std::string(line), &t);
    if (!s.ok()) {  // Unknown fields fail either parse, so at most one of the two formats fits a line.
      v1::DatasetRecord record;
      auto r = google::protobuf::util::JsonStringToMessage(std::string(line), &record);
      if (!r.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": neither a kernelrl.v1.Task (",
                                                       s.ToString(), ") nor a kernelrl.v1.DatasetRecord (",
                                                       r.ToString(), ")"));
      }
      t = TaskFromDatasetRecord(record);
    }
    if (t.id().empty()) return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": task without an id"));
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace kernelrl::learner::rl
