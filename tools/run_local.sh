#!/usr/bin/env bash
# The README's first command: a short learning run on this machine.
#   bash tools/run_local.sh [kernelrl learn flags]
# Installs what is missing (tools/setup.sh), builds, makes the learnable task
# family at CPU sizes (data/family), the engineer corpus with its tokenizer and a
# tiny code model pre-trained on it for a few steps (tools/codemodel,
# docs/CODEMODEL.md), then `kernelrl learn --preset=family --preset=quick_cpu`:
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
  //actor:actor_main //tools/cli:kernelrl //data/family:family_gen \
  //tools/codemodel:corpus_gen //tools/codemodel:pretrain 2>&1 | tail -1
bin="$(bazel info bazel-bin 2>/dev/null)"
case "${1:-}" in
  --job=*|--check)
    exec "$bin/tools/cli/kernelrl" up --bin_dir="$bin" --repo_dir="$PWD" "$@" ;;
esac
run=/tmp/kernelrl-run-$(date +%Y%m%d-%H%M%S)
mkdir -p "$run"
echo "[run_local] setup and build took $((SECONDS - T0)) s; run directory $run"
"$bin/data/family/family_gen" --out="$run/family" --device=cpu > "$run/family.log" 2>&1 ||
  { cat "$run/family.log"; exit 1; }
"$bin/tools/codemodel/corpus_gen" --config=configs/learn/family.textproto --tasks="$run/family/train.jsonl" \
  --out="$run/corpus" --device=cpu --per_task=2 --vocab_size=2048 > "$run/corpus.log" 2>&1 || { cat "$run/corpus.log"; exit 1; }
"$bin/tools/codemodel/pretrain" --corpus_dir="$run/corpus" --out="$run/assets/model" --steps=20 --batch=4 \
  --hidden=64 --layers=2 --heads=4 --kv_heads=2 --intermediate=176 > "$run/pretrain.log" 2>&1 ||
  { cat "$run/pretrain.log"; exit 1; }
echo "[run_local] a tiny code model (2 layers, hidden 64, 20 SFT steps on the engineer corpus) in $run/assets/model;" \
  "$(sed -n 's/^family_gen: //p' "$run/family.log")"
exec "$bin/tools/cli/kernelrl" learn --preset=family --preset=quick_cpu --bin_dir="$bin" \
  --base_checkpoint="$run/assets/model" --family_dir="$run/family" --run_dir="$run/learn" "$@"
