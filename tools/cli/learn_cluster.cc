#include "tools/cli/learn_cluster.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace kernelrl::cli {

namespace fs = std::filesystem;

const char kLearnUsage[] =
    "usage: kernelrl learn --base_checkpoint=DIR --family_dir=DIR [--backend=cpu|cuda] [--learner_device=cpu|cuda]\n"
    "         [--run_dir=DIR]\n"
    "         [--bin_dir=DIR] [--actors=N] [--random_actors=N] [--concurrent_rollouts=N]\n"
    "         [--ablation=none|no_rft|no_value|no_rft_no_value] [--eval_every=K] [--eval_tasks=N]\n"
    "         [--eval_rollouts=R] [--eval_temperature=T] [--rollouts_per_task=G] [--job_set=FIELD=VALUE ...] [--set=SERVICE.FIELD=VALUE ...]\n"
    "         [--pause_at_timeout] [--pause_after_agentic_steps=K] [--resume --run_dir=DIR]\n"
    "         [--job_timeout_s=S] [--stall_timeout_s=S] [--python=PY] [--plot_script=FILE]\n"
    "The recipe on the task family as one job (tools/cli/learn_cmd.h, docs/LEARNING.md).\n";

// The recipe for a model learning the family's vocabulary from scratch: few
// turns, 4-token replies (only a reply's first 4 characters act), learning
// rates far above fine-tuning's 3e-6. Measured on the CPU backend: at actor lr
// 1e-4 and RFT 3e-4 x 2 epochs the policy stayed uniform over the 1,190-token
// vocabulary (entropy 7.081 -> 7.080 in 30 updates); Adam moves each weight by
// about lr per update, so a from-scratch head needs ~1e-3 to move in tens of steps.
// RFT must concentrate the policy on the vocabulary's characters before PPO: each
// token's logit learns alone, so PPO over a 1,190-way spread barely moves. CPU:
// RFT 16 updates at 3e-3 left entropy at ~5; 40 updates at 5e-3 (20 epochs of 32
// trajectories, batch 16) reached 1.5. On the H100 (31 PPO updates of 16) the
// critic explained ~0 of the return, so advantages R - V were mostly positive and
// pushed every sampled token up: advantages are normalised over the batch. Stale
// trajectories (lag 3 at max_policy_lag 2) were 12% of the agentic rollouts: lag 4,
// which the truncated importance weights correct. Four H100 runs later the policy still
// gave one reply to every task: the critic told tasks apart no better than the batch mean,
// so the tasks that pay more (GEMMs: 3 for the library path) set every task's reply. Each
// task now comes in groups of --rollouts_per_task and its rollouts are centred on the mean
// of its others (ppo.task_baseline).

constexpr int kReplyTokens = 4;

// Short, and SKILL.md is left out of the prompt (rollout.omit_skill_from_prompt): the model
// learns from scratch and cannot read either, and the shorter the prompt, the larger the share
// of the task line it has to condition its choice on.
constexpr char kSystemPrompt[] =
    "Reply with four digits, the design of the task's kernel (SKILL.md lists the slots), or '.' when done.";

std::vector<std::string> PromptFlags(const std::string& prefix, const std::string& skill_path) {
  return {prefix + "skill_path=" + skill_path, prefix + "system_prompt=" + kSystemPrompt,
          prefix + "omit_skill_from_prompt=true", absl::StrCat(prefix, "max_new_tokens_per_turn=", kReplyTokens),
          prefix + "context_tokens=16384"};
}

absl::StatusOr<LearnOptions> ParseLearnFlags(int argc, char** argv) {
  LearnOptions o;
  std::string bad_number;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    std::string v;
    auto value = [&](absl::string_view flag, std::string* out) {
      absl::string_view rest = a;
      if (!absl::ConsumePrefix(&rest, flag)) return false;
      *out = std::string(rest);
      return true;
    };
    auto number = [&](absl::string_view flag, auto* out) {
      std::string text;
      if (!value(flag, &text)) return false;
      double d = 0;
      if (!absl::SimpleAtod(text, &d)) bad_number = std::string(a);
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(d);
      return true;
    };
    if (a == "--help" || a == "-h") return absl::CancelledError("help");
    if (a == "--pause_at_timeout" || a == "--resume") {
      (a == "--resume" ? o.resume : o.pause_at_timeout) = true;
      continue;
    }
    if (value("--base_checkpoint=", &o.base_checkpoint) || value("--family_dir=", &o.family_dir) ||
        value("--run_dir=", &o.run_dir) || value("--bin_dir=", &o.bin_dir) || value("--python=", &o.python) ||
        value("--plot_script=", &o.plot_script) || number("--actors=", &o.actors) ||
        number("--random_actors=", &o.random_actors) || number("--concurrent_rollouts=", &o.concurrent_rollouts) ||
        number("--eval_every=", &o.eval_every) || number("--eval_tasks=", &o.eval_tasks) ||
        number("--eval_rollouts=", &o.eval_rollouts) || number("--eval_temperature=", &o.eval_temperature) ||
        number("--rollouts_per_task=", &o.rollouts_per_task) ||
        number("--pause_after_agentic_steps=", &o.pause_after_agentic_steps) ||
        number("--job_timeout_s=", &o.job_timeout_s) ||
        number("--stall_timeout_s=", &o.stall_timeout_s)) {
      continue;
    }
    if (value("--learner_device=", &o.learner_device)) {
      if (o.learner_device != "cpu" && o.learner_device != "cuda") {
        return absl::InvalidArgumentError("--learner_device: cpu or cuda");
      }
    } else if (value("--backend=", &o.backend)) {
      if (o.backend != "cpu" && o.backend != "cuda") return absl::InvalidArgumentError("--backend: cpu or cuda");
    } else if (value("--ablation=", &o.ablation)) {
      if (o.ablation != "none" && o.ablation != "no_rft" && o.ablation != "no_value" && o.ablation != "no_rft_no_value") {
        return absl::InvalidArgumentError("--ablation: none, no_rft, no_value or no_rft_no_value");
      }
    } else if (value("--job_set=", &v)) {
      const size_t eq = v.find('=');
      if (eq == std::string::npos) return absl::InvalidArgumentError("--job_set=FIELD=VALUE: " + v);
      o.job_sets.push_back(v);
    } else if (value("--set=", &v)) {
      const size_t dot = v.find('.');
      const std::string service = v.substr(0, dot);
      if (dot == std::string::npos || (service != "learner" && service != "sandbox" && service != "actor")) {
        return absl::InvalidArgumentError("--set=SERVICE.FIELD=VALUE with SERVICE learner|sandbox|actor: " + v);
      }
      o.sets[service].push_back("--set=" + v.substr(dot + 1));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a));
    }
  }
  if (!bad_number.empty()) return absl::InvalidArgumentError("not a number: " + bad_number);
  if (o.rollouts_per_task < 1) return absl::InvalidArgumentError("--rollouts_per_task: at least 1");
  if (o.resume && o.run_dir.empty()) return absl::InvalidArgumentError("--resume needs the paused run's --run_dir");
  if (o.base_checkpoint.empty() || o.family_dir.empty()) {
    return absl::InvalidArgumentError("--base_checkpoint and --family_dir are required");
  }
  return o;
}

std::string SelfExe() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).string();
}

absl::StatusOr<std::string> FindBinDir(const std::string& flag) {
  std::vector<std::string> candidates;
  if (!flag.empty()) candidates.push_back(flag);
  const fs::path self = SelfExe();
  candidates.push_back(self.string() + ".runfiles/kernelrl");
  candidates.push_back(self.parent_path().parent_path().parent_path().string());
  if (const char* rf = getenv("RUNFILES_DIR")) candidates.push_back(std::string(rf) + "/kernelrl");
  for (const std::string& c : candidates) {
    if (access((c + "/learner/learner_main").c_str(), X_OK) == 0 && access((c + "/actor/actor_main").c_str(), X_OK) == 0) {
      return c;
    }
  }
  return absl::NotFoundError("service binaries not found (build them, or pass --bin_dir=bazel-bin)");
}

bool Serving(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response).ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace kernelrl::cli
