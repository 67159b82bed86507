#!/usr/bin/env bash
# Learner device checks in one call; see docs/LEARNER.md.
#   0. stage: binaries built here with Bazel (learner_bench, model_test,
#      tokenizer_test) + the Debian .so files they need, carried in
#      .devcarry/learner/ (made by `tools/device_learner.sh --stage` here);
#      LibTorch comes from the device's own torch (same 2.11.0).
#   1. fp32 parity on CUDA vs transformers (logits <= 1e-4, 64 greedy tokens)
#      and tokenizer ids vs HF tokenizers on 10,500 lines;
#   2. benchmarks vs HF transformers, same config/GPU/script: fwd+bwd tokens/s
#      at 8K (Qwen2-0.5B shape, bf16), peak memory at 32K, decode tokens/s at
#      batch 32 x (128 prompt + 256 new).
# Results under $OUT; a table last.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/learner

if [ "${1:-}" = "--stage" ]; then  # Run HERE, after `bazel build`.
  set -e
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib" "$C/libcxx"
  for b in learner/bench/learner_bench learner/model_test learner/fused_ops_test agent/tokenizer/tokenizer_test; do
    cp "$ROOT/bazel-bin/$b" "$C/bin/"
  done
  . "$ROOT/tools/device_libs.sh"
  device_stage_libs --without-torch --libcxx "$C" "$C"/bin/*
  du -sh "$C"
  exit 0
fi

T0=$(date +%s)
OUT=${OUT:-/tmp/learner_out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 KERNELRL_PYTHON=$PY
S=$OUT/summary.txt; : > "$S"
say() { echo "$*" | tee -a "$S"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
. "$(dirname "$0")/device_libs.sh"
device_lib_path "$C" "$C/bin/learner_bench"
say "== device: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader)"
say "== torch $($PY -c 'import torch,transformers,tokenizers;print(torch.__version__, transformers.__version__, tokenizers.__version__)')"
"$C/bin/learner_bench" 2>&1 | head -3 | tee -a "$S"

# LEARNER_ONLY=train: skip parity, tokenizer and decode (a short re-run of
# the training benchmarks after a change).
ONLY=${LEARNER_ONLY:-all}
cd "$ROOT"
if [ "$ONLY" = profile ]; then
  # Where the training step's GPU time goes (per kernel name), and which
  # SDPA backend is fastest at this shape.
  timeout 120 "$C/bin/learner_bench" profile 8192 > "$OUT/profile.jsonl" 2> "$OUT/profile.err"
  say "== profile rc=$? at $(elapsed)s"; head -45 "$OUT/profile.jsonl" | tee -a "$S"
  timeout 120 $PY learner/bench/attention_bench.py 8192 2>&1 | tee -a "$S"
  ONLY=train
fi
if [ "$ONLY" = all ]; then
# 1. Parity on CUDA (fp32) and tokenizer.
export TEST_TMPDIR=/tmp/learner_test; mkdir -p $TEST_TMPDIR
KERNELRL_TEST_DEVICE=cuda timeout 180 "$C/bin/model_test" --gtest_filter='Families/*:ModelTest.CudnnAttention*' > "$OUT/model_test_cuda.log" 2>&1
say "== model parity on CUDA fp32: rc=$? ($(grep -c '\[       OK' "$OUT/model_test_cuda.log") OK, $(grep -c '\[  FAILED' "$OUT/model_test_cuda.log") failed) at $(elapsed)s"
grep -E "FAILED|Failure|max \|" "$OUT/model_test_cuda.log" | head -8 | tee -a "$S"
timeout 180 "$C/bin/tokenizer_test" > "$OUT/tokenizer_test.log" 2>&1
say "== tokenizer vs HF tokenizers: rc=$? ($(grep -c '\[       OK' "$OUT/tokenizer_test.log") OK, $(grep -c '\[  FAILED' "$OUT/tokenizer_test.log") failed) at $(elapsed)s"
fi

# Fused kernels vs eager autograd on CUDA (every mode: the benchmarks below use them).
KERNELRL_TEST_DEVICE=cuda timeout 120 "$C/bin/fused_ops_test" > "$OUT/fused_ops_test_cuda.log" 2>&1
say "== fused kernels vs eager ATen on CUDA (fp32, bf16): rc=$? ($(grep -c '\[       OK' "$OUT/fused_ops_test_cuda.log") OK, $(grep -c '\[  FAILED' "$OUT/fused_ops_test_cuda.log") failed, $(grep -c '\[  SKIPPED' "$OUT/fused_ops_test_cuda.log") skipped)"
grep -E "Failure|Expected|Which is|rel" "$OUT/fused_ops_test_cuda.log" | head -12 | tee -a "$S"

# 2. Benchmarks: ours and HF, same GPU, one after the other.
B=$OUT/bench.jsonl; : > "$B"
run() { timeout "$1" "${@:2}" >> "$B" 2>> "$OUT/bench.err" || echo "{\"failed\": \"${*:2}\", \"rc\": $?}" >> "$B"; }
run 120 "$C/bin/learner_bench" train 8192
run 120 "$C/bin/learner_bench" train 8192 --unfused
run 120 $PY learner/bench/hf_bench.py train 8192
run 90 "$C/bin/learner_bench" memory 32768
run 90 "$C/bin/learner_bench" memory 32768 --ckpt
[ "$ONLY" = all ] && run 90 $PY learner/bench/hf_bench.py memory 32768
run 90 "$C/bin/learner_bench" train 8192 --ckpt
# Flash attention (the model's choice) against torch's default (cuDNN's on Hopper): at one fixed
# length, and on packed rows of fresh lengths.
run 120 "$C/bin/learner_bench" train 8192 --sdpa_cudnn
run 120 "$C/bin/learner_bench" varlen 12
run 120 "$C/bin/learner_bench" varlen 12 --sdpa_cudnn
if [ "$ONLY" = all ]; then
  run 120 "$C/bin/learner_bench" decode 32 128 256
  run 150 $PY learner/bench/hf_bench.py decode 32 128 256
fi
if [ "$ONLY" = all ]; then  # Where the fused step's GPU time goes now.
  timeout 120 "$C/bin/learner_bench" profile 8192 > "$OUT/profile.jsonl" 2> "$OUT/profile.err"
  say "== profile (top kernels, fused path) rc=$?"; head -16 "$OUT/profile.jsonl" | cut -c1-200 | tee -a "$S"
fi
say "== benchmarks done at $(elapsed)s"
cat "$B" | tee -a "$S"
tail -5 "$OUT/bench.err" 2>/dev/null
$PY - "$B" <<'PYEOF' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def get(impl, bench, **kw):
    if impl == "kernelrl" and bench != "decode":
        kw.setdefault("fused", True)  # the --unfused rows are the A/B baseline
        if bench in ("train", "varlen"):
            kw.setdefault("sdpa_cudnn", False)  # and the --sdpa_cudnn rows the attention's
    for r in rows:
        if r.get("impl") == impl and r.get("bench") == bench and all(r.get(k) == v for k, v in kw.items()):
            return r
    return {}
print("%-34s %14s %14s %8s" % ("benchmark", "kernelrl", "HF", "ratio"))
for name, bench, key, kw in [("fwd+bwd tokens/s @8K bf16", "train", "tokens_per_s", {"seq": 8192}),
                             ("peak GiB @32K fwd+bwd", "memory", "peak_gib", {"seq": 32768}),
                             ("decode tokens/s B32 P128 N256", "decode", "tokens_per_s", {"batch": 32})]:
    a = get("kernelrl", bench, **kw).get(key) if bench != "memory" else get("kernelrl", bench, ckpt=False, **kw).get(key)
    b = get("hf", bench, **kw).get(key)
    ratio = "%.2fx" % (a / b) if a and b else "-"
    print("%-34s %14s %14s %8s" % (name, a, b, ratio))
c = get("kernelrl", "memory", ckpt=True, seq=32768).get("peak_gib")
t = get("kernelrl", "train", ckpt=True, seq=8192).get("tokens_per_s")
print("with activation checkpointing: peak GiB @32K = %s, fwd+bwd tokens/s @8K = %s" % (c, t))
m = get("kernelrl", "train", seq=8192, ckpt=False)
u = get("kernelrl", "train", seq=8192, ckpt=False, fused=False)
k = get("kernelrl", "train", seq=8192, ckpt=False, sdpa_cudnn=True)
print("fwd+bwd tokens/s @8K with cuDNN attention allowed (torch's default): %s (flash/cuDNN %s)" % (
    k.get("tokens_per_s"), "%.2fx" % (m["tokens_per_s"] / k["tokens_per_s"])
    if m.get("tokens_per_s") and k.get("tokens_per_s") else "-"))
for cudnn in (False, True):
    v = get("kernelrl", "varlen", sdpa_cudnn=cudnn)
    print("packed rows of 8 fresh lengths, %s: %s ms a step on new lengths, %s on lengths seen before" % (
        "cuDNN attention allowed (torch's default)" if cudnn else "flash attention (the model's choice)",
        v.get("new_lengths_step_ms"), v.get("seen_lengths_step_ms")))
print("kernelrl MFU @8K: %s; eager-ATen path (--unfused) %s tokens/s, fused/unfused %s" % (
    m.get("mfu_vs_989"), u.get("tokens_per_s"),
    "%.2fx" % (m["tokens_per_s"] / u["tokens_per_s"]) if m.get("tokens_per_s") and u.get("tokens_per_s") else "-"))
PYEOF
