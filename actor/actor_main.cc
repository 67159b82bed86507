// The actor binary: rollout workers (actor/actor.h). It serves no RPCs of its
// own (it is a client of the learner, the policy and the sandboxes), only
// health, diagnostics and /metrics. Everything comes from ActorConfig.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "actor/actor.h"
#include "agent/policy/policy_factory.h"
#include "actor/sandbox_pool.h"
#include "agent/chat/tools.h"
#include "common/file.h"
#include "common/service.h"
#include "proto/actor_config.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50054 metrics_port: 9104 drain_seconds: 2 grace_seconds: 30 }
  learner_address: "127.0.0.1:50051"
  concurrent_rollouts: 8
  rollout {
    max_turns: 150
    eval_max_turns: 200
    context_tokens: 131072
    wall_seconds: 7200
    max_new_tokens_per_turn: 8192
    temperature: 1.0
    top_p: 1.0
    workspace_root: "/var/tmp/kernelrl-actor"
    skill_path: "sandbox/SKILL.md"
    final_evaluation: true
    tools { bash_default_timeout_s: 120 bash_max_timeout_s: 600 output_cap_bytes: 30000 read_max_lines: 2000 max_file_bytes: 1048576 max_background_jobs: 4 }
    isolation { contain: true tmp_bytes: 268435456 data_bytes: 8589934592 file_bytes: 268435456 cpu_seconds: 3600 max_open_files: 1024 }
  }
  policy { kind: "grpc" address: "127.0.0.1:50051" timeout_seconds: 600 max_retries: 2 }
  sandbox { target: "ipv4:127.0.0.1:50052" health_check: true deadline_seconds: 900 retries: 1 }
  learner { lease_batch: 1 lease_backoff_seconds: 2 max_unacked: 1 reconnect_backoff_seconds: 1 rpc_timeout_seconds: 60 }
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
  return RunServiceMain(argc, argv, "actor", kDefaults, &config, config.mutable_server(),
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
