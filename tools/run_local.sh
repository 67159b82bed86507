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
# On a machine with a CUDA GPU (nvidia-smi lists one and torch sees it) the same
# run uses the GPU family instead: CUDA kernels, the CUDA sandbox with profiling
# and eager / torch.compile baselines measured first, a 3.8M-parameter base model
# pre-trained in bf16, `--preset=family --preset=quick_gpu` on 9 training and 12
# held-out tasks (tools/device_codemodel.sh with LOCAL_RUN: the same steps the
# device check runs). The learner trains on the CPU there: on one GPU its decoding
# would share the GPU with the timed kernels, and every such timing is declined.
#   bash tools/run_local.sh --cpu         the CPU run on a machine with a GPU
#   bash tools/run_local.sh --job=smoke   the scripted-policy plumbing job (`kernelrl up`)
#   bash tools/run_local.sh --check       `kernelrl up --check`: every process's health, then stop
#   bash tools/run_local.sh --job=none    `kernelrl up`: the cluster runs until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
PRETRAIN_STEPS=150
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
T1=$SECONDS
gpu=0
if [ "${1:-}" = "--cpu" ]; then
  shift
elif nvidia-smi -L > /dev/null 2>&1 && python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2> /dev/null; then
  gpu=1
fi
if [ $gpu = 1 ]; then
  echo "[run_local] a CUDA GPU: the GPU family ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); staging (log: $run/stage.log)"
  bash tools/device_codemodel.sh --stage > "$run/stage.log" 2>&1 || { tail -20 "$run/stage.log"; exit 1; }
  rc=0
  LOCAL_RUN=$run PRESETS="family quick_gpu" LEARNER_DEVICE=cpu LEARN_ARGS="$*" bash tools/device_codemodel.sh || rc=$?
  echo "[run_local] $((SECONDS - T1)) s after the build"
  exit $rc
fi
"$bin/data/family/family_gen" --out="$run/family" --device=cpu > "$run/family.log" 2>&1 ||
  { cat "$run/family.log"; exit 1; }
# The corpus with the run's presets: the engineer and the prompts as the warm-up's actors will have them.
presets="--config=configs/learn/family.textproto --config=configs/learn/quick_cpu.textproto"
"$bin/tools/codemodel/corpus_gen" $presets --tasks="$run/family/train.jsonl" \
  --out="$run/corpus" --device=cpu --per_task=2 --vocab_size=2048 > "$run/corpus.log" 2>&1 || { cat "$run/corpus.log"; exit 1; }
echo "[run_local] $(sed -n 's/^family_gen: //p' "$run/family.log"); engineer corpus:" \
  "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("%d trajectories, %.0f tokens each (%.0f the model'"'"'s), %d-token BPE" % (s["trajectories"], s["mean_tokens"], s["mean_model_tokens"], s["vocab_size"]))' "$run/corpus/stats.json")"
echo "[run_local] pre-training the base model (2 layers, hidden 64, $PRETRAIN_STEPS SFT steps of 2 trajectories; log: $run/pretrain.log)"
"$bin/tools/codemodel/pretrain" --corpus_dir="$run/corpus" --out="$run/assets/model" --steps=$PRETRAIN_STEPS --batch=2 \
  --lr=1e-2 --warmup_steps=10 --threads=1 --hidden=64 --layers=2 --heads=4 --kv_heads=2 --intermediate=176 \
  > "$run/pretrain.log" 2>&1 || { cat "$run/pretrain.log"; exit 1; }
echo "[run_local] base model in $run/assets/model: $(python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("%d parameters, SFT loss %.2f -> %.2f in %.0f s" % (r["parameters"], r["first_loss"], r["last_loss"], r["seconds"]))' "$run/pretrain.log")"
echo "[run_local] $((SECONDS - T1)) s after the build; now the recipe (kernelrl learn --preset=family --preset=quick_cpu)"
rc=0
"$bin/tools/cli/kernelrl" learn --preset=family --preset=quick_cpu --bin_dir="$bin" \
  --base_checkpoint="$run/assets/model" --family_dir="$run/family" --run_dir="$run/learn" "$@" || rc=$?
echo "[run_local] $((SECONDS - T1)) s after the build (load average now: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
exit $rc
