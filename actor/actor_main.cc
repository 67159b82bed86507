// The actor binary: rollout workers (actor/actor.h). It serves no RPCs of its
// own (it is a client of the learner, the policy and the sandboxes), only
// health, diagnostics and /metrics. Everything comes from ActorConfig.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "actor/actor.h"
#include "actor/defaults.h"
#include "agent/policy/policy_factory.h"
#include "actor/sandbox_pool.h"
#include "agent/chat/tools.h"
#include "common/file.h"
#include "common/service.h"
#include "proto/actor_config.pb.h"

namespace {
constexpr char kServerDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50054 metrics_port: 9104 drain_seconds: 2 grace_seconds: 30 }
)pb";
}  // namespace

int main(int argc, char** argv) {
  using namespace kernelrl;
  v1::ActorConfig config;
  std::unique_ptr<agent::Tokenizer> tokenizer;
  std::optional<agent::ChatFormat> with_tools, plain;
  std::unique_ptr<agent::PolicyClient> policy;
  std::unique_ptr<actor::SandboxPool> pool;
  std::unique_ptr<actor::RolloutRunner> runner;
  std::unique_ptr<actor::LearnerClient> learner;
  std::unique_ptr<actor::Actor> workers;
  return RunServiceMain(argc, argv, "actor", absl::StrCat(kServerDefaults, actor::kActorDefaultsText), &config, config.mutable_server(),
                        [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
                          if (config.actor_id().empty()) {
                            char host[256] = {0};
                            gethostname(host, sizeof(host) - 1);
                            config.set_actor_id(absl::StrCat(host, "-", getpid()));
                          }
                          auto tok = agent::Tokenizer::Load(config.tokenizer_path());
                          if (!tok.ok()) return tok.status();
                          tokenizer = *std::move(tok);
                          auto wt = agent::ChatFormat::Create(tokenizer.get(), agent::ToolSchemas());
                          auto pl = agent::ChatFormat::Create(tokenizer.get(), Json::array());
                          if (!wt.ok()) return wt.status();
                          if (!pl.ok()) return pl.status();
                          with_tools.emplace(*std::move(wt));
                          plain.emplace(*std::move(pl));
                          auto p = agent::MakePolicyClient(config.policy(), tokenizer.get(), plain->im_end_id());
                          if (!p.ok()) return p.status();
                          policy = *std::move(p);
                          auto s = actor::SandboxPool::Create(config.sandbox());
                          if (!s.ok()) return s.status();
                          pool = *std::move(s);
                          std::string skill;
                          if (!config.rollout().skill_path().empty()) {
                            auto text = ReadFileToString(config.rollout().skill_path());
                            if (!text.ok()) return text.status();
                            skill = *text;
                          }
                          runner = std::make_unique<actor::RolloutRunner>(
                              actor::RolloutDeps{policy.get(), pool.get(), tokenizer.get(), &*with_tools, &*plain},
                              config.rollout(), skill);
                          learner = std::make_unique<actor::LearnerClient>(
                              grpc::CreateChannel(config.learner_address(), grpc::InsecureChannelCredentials()),
                              config.learner(), config.actor_id());
                          workers = std::make_unique<actor::Actor>(runner.get(), learner.get(), config, &DefaultRegistry());
                          workers->Start();
                          return std::vector<grpc::Service*>{};
                        },
                        /*healthy=*/nullptr,
                        // No new lease once asked to stop: a stage that starts while
                        // this actor drains must not get its rollouts.
                        [&] {
                          if (workers) workers->StopLeasing();
                        });
}
