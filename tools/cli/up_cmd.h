// `kernelrl up`: the embedded single-machine cluster and its plumbing job
// (tools/run_local.sh --job=smoke).
//
//   kernelrl up [--actors=N] [--check] [--job=smoke|none] [--job_spec=FILE]
//               [--backend=auto|cpu|cuda] [--run_dir=DIR] [--bin_dir=DIR] [--repo_dir=DIR]
//               [--shared_dir=DIR]
//               [--ready_timeout_s=S] [--job_timeout_s=S] [--stall_timeout_s=S]
//               [--set=SERVICE.FIELD=VALUE ...]   (kernelrl up --help; kernelrl.v1.UpConfig)
//
// Starts learner, sandbox and N actors (default 2) as supervised
// processes (up_supervisor.h: restart on crash with back-off). Servers bind
// loopback ports the kernel picks; once known they are pinned, so a restarted
// learner or sandbox comes back where its clients look. The sandbox runs its
// CUDA backend when a GPU is present, its CPU backend otherwise (--backend).
// `--set=sandbox.verify.wall_seconds=30` passes `--set=verify.wall_seconds=30`
// to that service (SERVICE: learner, sandbox, actor).
//
// Everything lands in one directory (--run_dir, default /tmp/kernelrl-up-<pid>):
//   <name>.log     each process's stdout+stderr, across restarts
//   <name>.ports   its grpc_port / metrics_port (written by the service)
//   up.log         the supervisor's events (starts, exits, restarts), as printed
//   up.status      one line per process: name pid restarts state (rewritten on
//                  every event; tests read pids from it)
//   learner-state/ the learner's state_dir (jobs, ledgers, checkpoints)
//   quickstart/    the smoke job's tiny random model and task set
//
// Then: --check reports every service's grpc.health.v1 status and stops (exit 0
// only if all are SERVING). Otherwise it submits a job to the learner and
// prints its progress (state, step, policy version, the job's metrics) as it
// changes, a final report and the restarts, then stops the cluster. The job is
// --job_spec (a kernelrl.v1.JobSpec in text format) or the smoke job: a tiny
// random model and tasks with scripted solutions (tools/cli/up_quickstart.py,
// from --repo_dir: default the runfiles or the working directory), two PPO
// updates, actors running the scripted policy. Without a GPU: the CPU-sized
// tasks and sandbox/solutions/cpu; with one: KernelBench level 1 from
// --shared_dir (default <repo>/../shared) and sandbox/solutions/level1. It
// fails after --job_timeout_s, or --stall_timeout_s without any change to the
// job. --job=none keeps the cluster running until Ctrl-C / SIGTERM.
// Exit codes: 0 success, 1 a service or the job failed, 2 bad flags.
#ifndef KERNELRL_TOOLS_CLI_UP_CMD_H_
#define KERNELRL_TOOLS_CLI_UP_CMD_H_

namespace kernelrl::up {

// argv[0] is "up" (or the program name); the flags follow.
int UpMain(int argc, char** argv);

}  // namespace kernelrl::up

#endif  // KERNELRL_TOOLS_CLI_UP_CMD_H_
