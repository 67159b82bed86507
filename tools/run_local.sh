#!/usr/bin/env bash
# The README's first command: `kernelrl up`, the embedded single-machine cluster.
# Installs what is missing (tools/setup.sh), builds the binaries, then starts
# learner, sandbox, profiler and N actors as supervised processes (restart on
# crash), submits the quickstart job, prints its progress and a final report,
# and stops. Flags go to `kernelrl up` (tools/cli/up_cmd.h), e.g.
#   --check           report every process's health, then stop
#   --job=none        no job: the cluster runs until Ctrl-C
#   --actors=N        actor processes (default 2)
#   --set=sandbox.verify.wall_seconds=30   a config override for one service
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# ops_kernelrl_up is `kernelrl up` (the same UpMain the tools/cli dispatcher registers).
bazel build //learner:learner_main //sandbox:sandbox_main //profiler_service:profiler_main \
  //actor:actor_main //tests:ops_kernelrl_up 2>&1 | tail -1
bin="$(bazel info bazel-bin 2>/dev/null)"
exec "$bin/tests/ops_kernelrl_up" --bin_dir="$bin" "$@"
