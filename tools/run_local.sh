#!/usr/bin/env bash
# The README's first command: a short learning run on this machine.
#   bash tools/run_local.sh [kernelrl learn flags]
# Installs what is missing (tools/setup.sh), builds, makes a tiny random Qwen2
# checkpoint (tools/cli/up_quickstart.py) and the learnable task family at CPU
# sizes (data/family), then `kernelrl learn --preset=family --preset=quick_cpu`:
# learner, CPU sandbox and actors as supervised processes run the recipe as one
# job (warm-up -> RFT -> value pretraining -> agentic PPO), with held-out tasks
# evaluated before and after; it prints a progress bar per stage and a report,
# and leaves the curve PNGs, logs and checkpoint in the run directory.
#   bash tools/run_local.sh --job=smoke   the scripted-policy plumbing job (`kernelrl up`)
#   bash tools/run_local.sh --check       `kernelrl up --check`: every process's health, then stop
#   bash tools/run_local.sh --job=none    `kernelrl up`: the cluster runs until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
bash tools/setup.sh
bazel build //learner:learner_main //sandbox:sandbox_main \
  //actor:actor_main //tools/cli:kernelrl //data/family:family_gen 2>&1 | tail -1
bin="$(bazel info bazel-bin 2>/dev/null)"
case "${1:-}" in
  --job=*|--check)
    exec "$bin/tools/cli/kernelrl" up --bin_dir="$bin" --repo_dir="$PWD" "$@" ;;
esac
run=/tmp/kernelrl-run-$(date +%Y%m%d-%H%M%S)
mkdir -p "$run"
echo "[run_local] setup and build took $((SECONDS - T0)) s; run directory $run"
python3 tools/cli/up_quickstart.py "$run/assets" "$PWD" > "$run/assets.log" 2>&1 ||
  { cat "$run/assets.log"; exit 1; }
"$bin/data/family/family_gen" --out="$run/family" --device=cpu > "$run/family.log" 2>&1 ||
  { cat "$run/family.log"; exit 1; }
echo "[run_local] a tiny random Qwen2 (2 layers, hidden 64) in $run/assets/model;" \
  "$(sed -n 's/^family_gen: //p' "$run/family.log")"
exec "$bin/tools/cli/kernelrl" learn --preset=family --preset=quick_cpu --bin_dir="$bin" \
  --base_checkpoint="$run/assets/model" --family_dir="$run/family" --run_dir="$run/learn" "$@"
