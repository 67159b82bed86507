#!/usr/bin/env bash
# The learner at scale on four GPUs in one call: fully sharded actor + critic
# PPO steps (learner/bench/fsdp_bench.cc; docs/LEARNER.md "Fully sharded").
#   stage (here, after `bazel build //learner/bench:fsdp_bench`):
#       bash tools/device_learner_scale.sh --stage      -> .devcarry/learner_scale/
#   on four GPUs (run tool, kind nvidia-h100-x4 or nvidia-h200-x4,
#   carry .devcarry/learner_scale); PARTS picks a subset. The models are
#   drawn on the GPUs (setup < 1 s); on 4x H200 (2026-11-28) 7b took ~1 min,
#   longest (32K, 64K, 128K) ~4 min, scaling ~3 min: two calls of the same
#   warm machine stay inside the 10-minute limit:
#       PARTS="plan 7b scaling" bash tools/device_learner_scale.sh
#       PARTS=longest LENGTHS="32768 65536 131072" bash tools/device_learner_scale.sh
#     plan     the memory plans printed (no GPU work)
#     7b       Qwen2.5-7B-shaped actor + critic (random init), 32K tokens per GPU
#              on 4 GPUs: step time, tokens/s/GPU, MFU vs 989 TFLOP/s, peak memory
#              per GPU beside the plan (rows halve until the plan fits the GPU)
#     scaling  Qwen2.5-1.5B shape, 16K tokens per GPU on 1, 2, 4 GPUs: tokens/s/GPU
#              and the efficiency against 1 GPU
#     longest  one 7B trajectory on 4 GPUs at 32K, 48K, 64K, 96K, 128K tokens
#              until one fails: the longest that runs, its peak beside the plan
#     lora     the 7b part with LoRA adapters (rank LORA_RANK, default 16) on
#              actor and critic: frozen bf16 base shards, adapters trained
#     lora1    the same 7B LoRA pair on one GPU at 16K tokens
#     offload  activation offload: model_test's offload gradients on GPU 0, then
#              one 7B trajectory of 32K tokens without and with offload (the
#              same loss, the peaks), then with offload at OFFLOAD_LENGTHS
#              (default 131072 196608 262144) until one fails; on OFFLOAD_GPUS
#              GPUs (default 4), fsdp_bench flags in OFFLOAD_ARGS (e.g.
#              --lora_rank=16: a 7B pair trains on one GPU only with adapters)
#   Knobs: LENGTHS (longest's token counts), LONGEST_WALL (its cap, s).
#   Results: one JSON line per bench in $OUT/results.jsonl, a table in $OUT/summary.txt.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/learner_scale

if [ "${1:-}" = "--stage" ]; then
  set -e
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib" "$C/libcxx"
  cp "$ROOT/bazel-bin/learner/bench/fsdp_bench" "$ROOT/bazel-bin/learner/model_test" "$C/bin/"
  ldd "$C/bin/fsdp_bench" | awk '/=> \// {print $3}' |
    grep -v -E 'torch|c10|libcuda|libnv|libcudart|libcublas|libcudnn|/libc\.so|/libm\.so|libgcc_s|libpthread|libdl\.|librt\.|libutil' |
    sort -u | while read -r so; do
      case "$so" in *libstdc++*) cp -L "$so" "$C/libcxx/";; *) cp -L "$so" "$C/lib/";; esac
    done
  du -sh "$C"
  exit 0
fi

OUT=${OUT:-/tmp/learner_scale_out}; mkdir -p "$OUT"
R=$OUT/results.jsonl; : > "$R"
S=$OUT/summary.txt; : > "$S"
. "$(dirname "$0")/device_libs.sh"
device_lib_path "$C" "$C/bin/fsdp_bench"
# NVLink multicast stays off (shared hosts; .library/device/KINDS.md); ranks inherit this environment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "== device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)" | tee -a "$S"
PARTS=${PARTS:-plan 7b scaling longest}
run() {  # name, timeout, args...
  local name=$1 limit=$2; shift 2
  echo "== $name: fsdp_bench $*" | tee -a "$S"
  timeout "$limit" "$C/bin/fsdp_bench" "$@" 2>"$OUT/$name.err" | tee -a "$R" "$S"
  [ "${PIPESTATUS[0]}" = 0 ] || echo "FAILED or stopped ($name): $(tail -3 "$OUT/$name.err")" | tee -a "$S"
}
for part in $PARTS; do
  case $part in
    plan)
      "$C/bin/fsdp_bench" plan qwen2.5-7b 32768 4 | tee -a "$S"
      "$C/bin/fsdp_bench" plan qwen2.5-1.5b 16384 1 | tee -a "$S";;
    7b) run 7b_32k_4gpu 420 step qwen2.5-7b 32768 4;;
    scaling)
      for g in 1 2 4; do run "1.5b_16k_${g}gpu" 150 step qwen2.5-1.5b 16384 "$g"; done
      python3 - "$R" <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"qwen2.5-1.5b"' in l and "fsdp_ppo_step" in l]
base = next((r for r in rows if r["gpus"] == 1), None)
for r in rows:
    eff = r["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"] if base else float("nan")
    print(f"scaling 1.5b: {r['gpus']} GPU(s) {r['tokens_per_s_per_gpu']:.0f} tokens/s/GPU, efficiency {eff:.2f}, MFU {r['mfu_vs_989']:.3f}")
PY
      ;;
    lora) run "7b_lora${LORA_RANK:-16}_32k_4gpu" 300 --lora_rank="${LORA_RANK:-16}" step qwen2.5-7b 32768 4;;
    lora1) run "7b_lora${LORA_RANK:-16}_16k_1gpu" 300 --lora_rank="${LORA_RANK:-16}" step qwen2.5-7b 16384 1;;
    offload)
      device_lib_path "$C" "$C/bin/model_test" --gtest_list_tests
      KERNELRL_TEST_DEVICE=cuda CUDA_VISIBLE_DEVICES=0 "$C/bin/model_test" --gtest_filter='*Offload*:*ActivationCheckpointing*' 2>&1 |
        grep -E '^\[ +(OK|FAILED|PASSED) ' | tee -a "$S"
      device_lib_path "$C" "$C/bin/fsdp_bench"
      g=${OFFLOAD_GPUS:-4}
      run 7b_32k_kept 200 ${OFFLOAD_ARGS:-} longest qwen2.5-7b "$g" 32768
      run 7b_offload 540 ${OFFLOAD_ARGS:-} --offload_activations longest qwen2.5-7b "$g" 32768 ${OFFLOAD_LENGTHS:-131072 196608 262144};;
    longest) run 7b_longest_4gpu "${LONGEST_WALL:-540}" longest qwen2.5-7b 4 ${LENGTHS:-32768 49152 65536 98304 131072};;
  esac
done
