#include "tools/cli/plan_cmd.h"

#include <cstdio>
#include <string>

#include "common/config.h"
#include "absl/strings/str_cat.h"
#include "learner/dist/memory_plan.h"
#include "learner/model_config.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::cli {
namespace {

constexpr char kDefaults[] = R"pb(
  gpus: 1 tokens: 32768 sharded: true activation_checkpointing: true gpu_gib: 80
)pb";

int Bad(const std::string& what) {
  std::fprintf(stderr, "kernelrl plan: %s\n", what.c_str());
  return 2;
}

}  // namespace

int PlanMain(int argc, char** argv) {
  v1::PlanConfig config;
  absl::StatusOr<ConfigRequest> req = LoadConfig(argc, argv, kDefaults, &config);
  if (!req.ok()) return Bad(std::string(req.status().message()));
  if (req->help) {
    std::printf("%s", ConfigUsage("kernelrl plan", "kernelrl.v1.PlanConfig").c_str());
    return 0;
  }
  if (req->print_config) {
    std::printf("%s", config.DebugString().c_str());
    return 0;
  }
  if (config.model().empty()) return Bad("model: a Hugging Face checkpoint directory is needed");
  if (config.gpus() < 1 || config.tokens() < 1) return Bad("gpus and tokens must be positive");
  auto actor = learner::ModelConfig::Load(config.model() + "/config.json");
  if (!actor.ok()) return Bad(std::string(actor.status().message()));
  learner::ModelConfig critic = *actor;
  const bool with_critic = config.critic() != "none";
  if (with_critic && !config.critic().empty()) {
    auto c = learner::ModelConfig::Load(config.critic() + "/config.json");
    if (!c.ok()) return Bad(std::string(c.status().message()));
    critic = *c;
  }
  learner::dist::PlanOptions o;
  o.world_size = config.gpus();
  o.tokens = config.tokens();
  o.sharded = config.sharded();
  o.activation_checkpointing = config.activation_checkpointing();
  o.offload_moments = config.offload_moments();
  o.device_bytes = static_cast<int64_t>(config.gpu_gib() * (1 << 30));
  if (config.actor_lora_rank() < 0 || config.critic_lora_rank() < 0) return Bad("LoRA ranks must be >= 0");
  o.offload_activations = config.offload_activations();
  o.actor_lora_rank = config.actor_lora_rank();
  o.critic_lora_rank = config.critic_lora_rank();
  const learner::dist::MemoryPlan plan = learner::dist::PlanMemory(*actor, with_critic ? &critic : nullptr, o);
  const std::string lora = o.actor_lora_rank > 0 || o.critic_lora_rank > 0
                               ? absl::StrCat(", LoRA rank ", o.actor_lora_rank, " (actor) / ", o.critic_lora_rank, " (critic)")
                               : "";
  std::printf("%s (%ld parameters)%s, %d GPU(s)%s%s%s, %ld-token rows, activation checkpointing %s:\n%s",
              config.model().c_str(), static_cast<long>(actor->ParameterCount()), with_critic ? " + critic" : "",
              config.gpus(), config.sharded() ? " fully sharded" : " (each holding whole models)",
              absl::StrCat(config.offload_moments() ? ", AdamW moments in host memory" : "",
                           config.offload_activations() ? ", layer inputs in host memory" : "")
                  .c_str(),
              lora.c_str(),
              static_cast<long>(config.tokens()), config.activation_checkpointing() ? "on" : "off",
              plan.Table().c_str());
  if (absl::Status s = learner::dist::CheckFits(plan); !s.ok()) {
    std::fprintf(stderr, "kernelrl plan: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace kernelrl::cli
