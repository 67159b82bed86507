#!/usr/bin/env bash
# The policy engine on one GPU (docs/LEARNER.md "Policy engine"), one run:
#   0. stage (here, after `bazel build -c opt //learner/bench:engine_bench
#      //learner/policy:paged_kv_test //learner:paged_decode_test`):
#      `tools/device_engine.sh --stage` fills .devcarry/engine/ with the
#      binary and the Debian .so files it links; LibTorch is the device's own
#      torch (same 2.11.0).
#   1. paged attention vs the contiguous cache and a full forward on CUDA
#      (paged_kv_test, fp32); the paged decode kernel vs fp64 attention
#      (paged_decode_test, fp32/bf16/fp16);
#   1b. one decode step of the model alone (engine_bench step), CUDA graph,
#      the paged decode kernel vs the gather + bmm path, at ENGINE_STEPS;
#   2. decode throughput, engine_bench (eager decode steps, then CUDA-graph
#      ones; the median of 5 runs each) vs HF generate() (hf_bench.py, one
#      run), same GPU, one after the other:
#      batch 32/128/256, 128-token prompts, 256 new tokens, greedy,
#      Qwen2.5-0.5B and Qwen2.5-7B shapes (random bf16);
#   3. a 20-turn agentic trajectory (8 rollouts of one task at once) with
#      prefix caching on and off (CUDA-graph decode in both): prompt and
#      prefilled tokens, wall.
# Knobs: ENGINE_SHAPES (default "0.5b 7b"), ENGINE_BATCHES (32,128,256),
# ENGINE_NEW (256), ENGINE_TURNS (20), ENGINE_ROLLOUTS (8), ENGINE_MODES
# (decode modes, "eager graphs"), ENGINE_HF (1: HF generate() beside them),
# ENGINE_AGENTIC ("on off": the prefix-cache settings replayed; empty: none), ENGINE_STEPS
# (B:CTX points of the step bench; empty: none), ENGINE_PROFILE (B:CTX
# points whose kernel step is then profiled per kernel, Kineto).
# Results: $OUT/bench.jsonl, $OUT/summary.txt (a table and ratios last).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/engine

if [ "${1:-}" = "--stage" ]; then
  set -e
  rm -rf "$C" && mkdir -p "$C/bin"
  cp "$ROOT/bazel-bin/learner/bench/engine_bench" "$ROOT/bazel-bin/learner/policy/paged_kv_test" \
    "$ROOT/bazel-bin/learner/paged_decode_test" "$C/bin/"
  . "$ROOT/tools/device_libs.sh"
  device_stage_libs --without-torch --libcxx "$C" "$C"/bin/*
  du -sh "$C"
  exit 0
fi

T0=$(date +%s)
OUT=${OUT:-/tmp/engine_out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
S=$OUT/summary.txt; : > "$S"
say() { echo "$*" | tee -a "$S"; }
. "$ROOT/tools/device_libs.sh"
device_lib_path "$C" "$C/bin/engine_bench"
say "== device: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader)"
say "== torch $($PY -c 'import torch,transformers;print(torch.__version__, transformers.__version__)')"
cd "$ROOT"
export TEST_TMPDIR=/tmp/engine_test; mkdir -p $TEST_TMPDIR
KERNELRL_TEST_DEVICE=cuda timeout 60 "$C/bin/paged_kv_test" > "$OUT/paged_kv_test_cuda.log" 2>&1
say "== paged vs contiguous on CUDA fp32: rc=$? ($(grep -c '\[       OK' "$OUT/paged_kv_test_cuda.log") OK, $(grep -c '\[  FAILED' "$OUT/paged_kv_test_cuda.log") failed)"
grep -E "Failure|max \|diff" "$OUT/paged_kv_test_cuda.log" | head -6 | tee -a "$S"
KERNELRL_TEST_DEVICE=cuda timeout 60 "$C/bin/paged_decode_test" > "$OUT/paged_decode_test_cuda.log" 2>&1
say "== paged decode kernel vs fp64 attention: rc=$? ($(grep -c '\[       OK' "$OUT/paged_decode_test_cuda.log") OK, $(grep -c '\[  SKIPPED' "$OUT/paged_decode_test_cuda.log") skipped, $(grep -c '\[  FAILED' "$OUT/paged_decode_test_cuda.log") failed)"
grep -E "Failure|error" "$OUT/paged_decode_test_cuda.log" | head -6 | tee -a "$S"
B=$OUT/bench.jsonl; : > "$B"
run() { timeout "$1" "${@:2}" >> "$B" 2>> "$OUT/bench.err" || echo "{\"failed\": \"${*:2}\", \"rc\": $?}" >> "$B"; }
BATCHES=${ENGINE_BATCHES:-32,128,256}
NEW=${ENGINE_NEW:-256}
for shape in ${ENGINE_SHAPES:-0.5b 7b}; do
  [ -n "${ENGINE_STEPS-x}" ] && run 150 "$C/bin/engine_bench" step "$shape" "${ENGINE_STEPS:-32:384,128:384,256:384,32:4096,128:2048}"
  [ -n "${ENGINE_PROFILE:-}" ] && run 150 "$C/bin/engine_bench" step "$shape" "$ENGINE_PROFILE" --profile
  say "== $shape decode step done at $(( $(date +%s) - T0 ))s"
done
for shape in ${ENGINE_SHAPES:-0.5b 7b}; do
  for mode in ${ENGINE_MODES:-eager graphs}; do
    run 150 "$C/bin/engine_bench" decode "$shape" "$BATCHES" 128 "$NEW" "$mode"
  done
  say "== $shape engine decode done at $(( $(date +%s) - T0 ))s"
  [ "${ENGINE_HF:-1}" = 1 ] || continue
  run 200 $PY learner/bench/hf_bench.py decode "$BATCHES" 128 "$NEW" "$shape"
  say "== $shape HF decode done at $(( $(date +%s) - T0 ))s"
done
for shape in ${ENGINE_SHAPES:-0.5b 7b}; do
  for cache in ${ENGINE_AGENTIC-on off}; do
    run 150 "$C/bin/engine_bench" agentic "$shape" "${ENGINE_ROLLOUTS:-8}" "${ENGINE_TURNS:-20}" "$cache"
  done
  say "== $shape agentic done at $(( $(date +%s) - T0 ))s"
done
tail -5 "$OUT/bench.err" 2>/dev/null
cat "$B" | tee -a "$S"
$PY - "$B" <<'PYEOF' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def get(**kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return {}
print("%-22s %12s %12s %17s %12s %8s %8s" % ("decode tokens/s (P128)", "eager", "graphs", "graphs min-max", "HF",
      "eager/HF", "graph/HF"))
ratio = lambda a, h: "%.1fx" % (a / h) if a and h else "-"
for shape in ("0.5b", "7b"):
    for b in sorted({r["batch"] for r in rows if r.get("bench") == "decode" and r.get("shape") == shape}):
        e = get(impl="kernelrl", bench="decode", shape=shape, batch=b, graphs=False).get("tokens_per_s")
        gr = get(impl="kernelrl", bench="decode", shape=shape, batch=b, graphs=True)
        g = gr.get("tokens_per_s")
        span = "%.0f-%.0f" % (gr["tokens_per_s_min"], gr["tokens_per_s_max"]) if "tokens_per_s_min" in gr else "-"
        h = get(impl="hf", bench="decode", shape=shape, batch=b).get("tokens_per_s")
        print("%-22s %12s %12s %17s %12s %8s %8s" % ("%s batch %d" % (shape, b), e, g, span, h, ratio(e, h),
              ratio(g, h)))
print("%-26s %10s %10s %8s %14s" % ("decode step (CUDA graph)", "kernel ms", "gather ms", "speedup", "kernel tok/s"))
for r in rows:
    if r.get("bench") == "step":
        print("%-26s %10.3f %10.3f %7.2fx %14.0f" % ("%s B%d ctx %d" % (r["shape"], r["batch"], r["ctx"]),
              r["kernel_ms"], r["gather_ms"], r["speedup"], r["kernel_tokens_per_s"]))
print("%-28s %14s %14s %10s %8s" % ("agentic (prefix cache)", "prefill tok", "prompt tok", "wall s", ""))
for shape in ("0.5b", "7b"):
    on = get(bench="agentic", shape=shape, prefix_caching=True)
    off = get(bench="agentic", shape=shape, prefix_caching=False)
    for name, r in (("on", on), ("off", off)):
        if r:
            print("%-28s %14s %14s %10s" % ("%s %s" % (shape, name), r["prefill_tokens"], r["prompt_tokens"], r["seconds"]))
    if on and off:
        print("%-28s prefill tokens off/on %.1fx, wall off/on %.2fx" % (
            shape, off["prefill_tokens"] / max(on["prefill_tokens"], 1), off["seconds"] / on["seconds"]))
PYEOF
say "== done at $(( $(date +%s) - T0 ))s"
