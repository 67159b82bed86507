#include "actor/defaults.h"

#include <cstdlib>

#include "common/log.h"
#include "google/protobuf/text_format.h"

namespace kernelrl::actor {

// Budgets from the paper (150 training turns, 200 in evaluation, 128 Ki
// tokens of context); the shell's limits keep one rollout from starving the
// host (256 MiB /tmp, 8 GiB data, 256 MiB files, an hour of CPU).
const char kActorDefaultsText[] = R"pb(
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
    final_infra_retries: 2
    tools { bash_default_timeout_s: 120 bash_max_timeout_s: 600 output_cap_bytes: 30000 read_max_lines: 2000 max_file_bytes: 1048576 max_background_jobs: 4 }
    isolation { contain: true tmp_bytes: 268435456 data_bytes: 8589934592 file_bytes: 268435456 cpu_seconds: 3600 max_open_files: 1024 }
  }
  policy { kind: "grpc" address: "127.0.0.1:50051" timeout_seconds: 600 max_retries: 2 }
  sandbox { target: "ipv4:127.0.0.1:50052" health_check: true deadline_seconds: 900 retries: 1 }
  learner { lease_batch: 1 lease_backoff_seconds: 2 max_unacked: 1 reconnect_backoff_seconds: 1 rpc_timeout_seconds: 60 }
)pb";

v1::ActorConfig ActorDefaults() {
  v1::ActorConfig config;
  // A compiled-in constant: a parse failure is a build defect, caught by actor_defaults_test.
  if (!google::protobuf::TextFormat::ParseFromString(kActorDefaultsText, &config)) {
    KLOG(ERROR) << "actor defaults do not parse";
    std::abort();
  }
  return config;
}

}  // namespace kernelrl::actor
