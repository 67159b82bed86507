#!/usr/bin/env bash
# The README's first command: `kernelrl up`, the embedded single-machine cluster.
# Installs what is missing (tools/setup.sh), builds the binaries, then starts
# learner, sandbox and N actors as supervised processes (restart on
# crash), submits the quickstart job, prints its progress and a final report,
# and stops. Flags go to `kernelrl up` (tools/cli/up_cmd.h), e.g.
#   --check           report every process's health, then stop
#   --job=none        no job: the cluster runs until Ctrl-C
#   --actors=N        actor processes (default 2)
#   --set=sandbox.verify.wall_seconds=30   a config override for one service
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //learner:learner_main //sandbox:sandbox_main \
  //actor:actor_main //tools/cli:kernelrl 2>&1 | tail -1
bin="$(bazel info bazel-bin 2>/dev/null)"
exec "$bin/tools/cli/kernelrl" up --bin_dir="$bin" --repo_dir="$PWD" "$@"
