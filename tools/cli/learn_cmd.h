// `kernelrl learn`: the CUDA-Agent recipe end to end on the learnable task
// family (data/family, docs/LEARNING.md), as one job through the job API.
//
//   kernelrl learn --base_checkpoint=DIR --family_dir=DIR [--preset=NAME ...] [--ablation=NAME]
//                  [--backend=cpu|cuda] [--run_dir=DIR] [--actors=N] [--eval_every=K] ...
//                  [--job_set=FIELD=VALUE ...] [--set=FIELD=VALUE ...]   (kernelrl learn --help)
//
// Config: kernelrl.v1.LearnConfig (tools/cli/command_line.h). The experiment
// (the recipe's hyper-parameters, the prompt and reply settings, the skill) is
// a preset, configs/learn/family.textproto unless --config or --preset names
// others; --ablation=NAME merges configs/learn/ablation_NAME.textproto after it;
// tools/run_local.sh adds configs/learn/quick_cpu.textproto (a few minutes on a CPU).
//
// Starts the learner (job API + its policy server on the base checkpoint) and a
// sandbox worker as supervised processes (tools/cli/up_supervisor.h), submits
// one recipe job on DIR/train.jsonl (family_gen's output) — single-turn PPO ->
// agent warm-up -> RFT -> value pretraining -> agentic PPO — and runs two pools
// of actor processes against it: `--random_actors` actors with the scripted
// kernel engineer (policy.kind engineer[_cpu], agent/policy/engineer_policy.h)
// while the job is in agent_warmup (their trajectories, paid by the sandbox, are
// the RFT and value-pretraining data), and `--actors` actors sampling the model
// (policy.kind grpc: the learner's Policy service; its replies are JSON tool
// calls like any model's) in every other stage. Held-out tasks (DIR/heldout/*.py) are
// evaluated with `kernelrl eval` (this binary, the same model, greedy)
// at the start (policy version 0), when agentic PPO starts, every K agentic PPO
// steps and at the end. --job_timeout_s bounds the run with its final evaluation: the
// job is cut early enough for it (job_cut.h), its actors stopped before it. A progress bar per
// stage while the job runs; at the end a
// report (learn_report.h: what was trained on what, held-out figures before -> after,
// where the curves, logs and checkpoint are), also in curves/report.txt.
//
// Output, in <state_dir>/jobs/<id>/curves/ (and printed): curves.json — per
// update the job's metrics (reward, entropy, explained variance, clip
// fraction, IS-ratio statistics, ...) and the verdicts of the trajectories it
// trained on (pass rate, faster than eager / torch.compile), per held-out
// evaluation its Table-1 figures and reward mean and spread, and an audit (hack
// flags with reward > 1, compile-cache hits); reward.png, rates.png,
// stability.png (tools/cli/learn_plots.py, matplotlib).
// A run may take several sittings: a pause stops the services with the job
// RUNNING in --run_dir, and --resume goes on from the learner's checkpoint.
// learn_cluster.h holds the flags and the processes; this file the run.
// Every held-out evaluation ends 20 s before --job_timeout_s, cut there with the tasks it finished.
// --eval_only scores the base checkpoint once and runs no job (under 30 s left for its evaluation:
// not started, exit 1).
// Exit codes: 0 job SUCCEEDED or paused (--eval_only: every task scored), 1 failed, 2 bad flags,
// 3 --eval_only cut at its limit (curves.json written, the cut recorded in its evaluation).
#ifndef KERNELRL_TOOLS_CLI_LEARN_CMD_H_
#define KERNELRL_TOOLS_CLI_LEARN_CMD_H_

namespace kernelrl::cli {

int LearnMain(int argc, char** argv);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_LEARN_CMD_H_
