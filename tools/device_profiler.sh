#!/usr/bin/env bash
# Profiler device checks in one call; see docs/PROFILER.md.
#   1. build libkprof.so (g++, CUPTI) and the test kernels (nvcc, sm_90);
#   2. measure the ceilings used for speed of light (D2D copy, bf16 GEMM);
#   3. CUPTI medians of 16 test kernels, CV of 10 repeated profiles, exploit cases;
#   4. ncu gpu__time_duration of the same kernels (clocks and caches as ours);
#   5. baseline precompute over .devcarry/kernelbench level1+level2 until the deadline.
# Results under $OUT (at most 8 files); a short table last.
# Knobs: ONLY=ncu runs 1, the CUPTI kernel medians of 3 and 4 (no ceilings, CV,
# exploits or precompute; ~1-2 min); KPROF_KERNELS=a,b restricts the kernel
# cases (checks.py); KPROF_FLUSH_MODES (write,read); NCU_LAUNCHES (5);
# SKIP_PRECOMPUTE=1; PRECOMPUTE_ONLY, WORKERS, BUDGET_S for step 5.
set -u
ONLY=${ONLY:-}
T0=$(date +%s)
TOTAL_S=${TOTAL_S:-560}
OUT=${OUT:-/tmp/profiler_out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
CUDA=${CUDA_HOME:-/usr/local/cuda}
B=/tmp/kprof_build; mkdir -p $B
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
elapsed() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt; : > $S
say() { echo "$*" | tee -a $S; }

say "== device: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader)"
CUPTI_H=$(dirname "$(find $CUDA/ $CUDA/extras -name cupti.h 2>/dev/null | head -1)")
CUPTI_SO=$(dirname "$(find $CUDA/ -name 'libcupti.so*' 2>/dev/null | head -1)")
say "== cupti include $CUPTI_H lib $CUPTI_SO; torch $($PY -c 'import torch;print(torch.__version__)')"
g++ -std=c++17 -O2 -fPIC -shared -Wall -I. -I$CUDA/include -I$CUPTI_H profiler_service/cupti/kprof.cc \
  -o $B/libkprof.so -L$CUPTI_SO -Wl,-rpath,$CUPTI_SO -L$CUDA/lib64/stubs -lcupti -lcuda || say "BUILD kprof FAILED"
nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC profiler_service/harness/device/kernels.cu -o $B/libkt.so \
  || say "BUILD kernels FAILED"
say "== built at $(elapsed)s"

[ "$ONLY" != ncu ] && timeout 60 $PY - <<'PYEOF' 2>&1 | tee -a $S
import torch
x = torch.rand(1 << 30, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
e0.record(); [y.copy_(x) for _ in range(10)]; e1.record(); torch.cuda.synchronize()
bw = 10 * 2 * x.numel() * 4 / (e0.elapsed_time(e1) / 1e3)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): a @ b
e0.record(); [a @ b for _ in range(10)]; e1.record(); torch.cuda.synchronize()
fl = 10 * 2 * 8192**3 / (e0.elapsed_time(e1) / 1e3)
print(f"== ceilings: D2D copy {bw/1e12:.2f} TB/s (read+write), bf16 GEMM {fl/1e12:.0f} TFLOP/s")
PYEOF

# ONLY=ncu: the kernel medians alone (no CV, no exploits), for the ncu table.
CHECKS=cupti; [ "$ONLY" = ncu ] && CHECKS=cupti_kernels
CUDA_INJECTION64_PATH=$B/libkprof.so KERNELRL_TEST_KERNELS=$B/libkt.so timeout 200 \
  $PY -m profiler_service.harness.device.checks $CHECKS $OUT > $OUT/checks.log 2>&1 || say "checks rc=$?"
tail -45 $OUT/checks.log
say "== cupti checks done at $(elapsed)s"

# The -k filter comes from checks.py (one list of cases). Matched against the
# demangled name: cuBLAS may run cutlass::Kernel2<cutlass_..._gemm_...>, whose
# bare function name would not match. Clocks and caches as before: never locked.
# An empty filter would profile every kernel (torch's too): skip instead.
NCU_K=$($PY -m profiler_service.harness.device.checks ncu_filter)
if [ -n "$NCU_K" ]; then
  KERNELRL_TEST_KERNELS=$B/libkt.so timeout 150 ncu --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --clock-control none \
    --cache-control all --csv --kernel-name-base demangled -k regex:"$NCU_K" \
    $PY -m profiler_service.harness.device.checks ncu_target > $OUT/ncu.csv 2>&1 || say "ncu rc=$?"
else
  say "ncu skipped: no -k filter from checks.py ncu_filter"
fi
say "== ncu done at $(elapsed)s"
$PY -m profiler_service.harness.device.checks compare $OUT 2>&1 | tee -a $S
[ -f $OUT/cv.json ] && $PY - $OUT/cv.json <<'PYEOF' 2>&1 | tee -a $S
import json, statistics, sys
cv = json.load(open(sys.argv[1]))
print(f"== CV of 10 profiles of {cv['kernel']} (~{statistics.mean(cv['medians_us']):.1f} us): {cv['cv']*100:.3f}%")
PYEOF

LEFT=$(( TOTAL_S - $(elapsed) - 45 ))
say "== precompute: $LEFT s"
if [ -d .devcarry/kernelbench ] && [ $LEFT -gt 60 ] && [ -z "${SKIP_PRECOMPUTE:-}" ] && [ -z "$ONLY" ]; then
  CUDA_INJECTION64_PATH=$B/libkprof.so TORCHINDUCTOR_COMPILE_THREADS=1 timeout $LEFT \
    $PY -m profiler_service.harness.precompute --tasks_root .devcarry/kernelbench --out $OUT/baselines.jsonl \
    --workers ${WORKERS:-10} --budget_s ${BUDGET_S:-0.4} --deadline_s $(( LEFT - 50 )) \
    ${PRECOMPUTE_ONLY:+--only $PRECOMPUTE_ONLY} > $OUT/precompute.log 2>&1
  say "precompute rc=$? at $(elapsed)s"
  $PY - $OUT/baselines.jsonl <<'PYEOF' 2>&1 | tee -a $S
import json, statistics, sys
ok = fail = 0; ratios = []; errs = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    med = lambda k: statistics.median(s.get("cupti_us") or s.get("event_us") for s in r[k]["samples"]) if r.get(k, {}).get("samples") else None
    e, c = med("eager"), med("compiled")
    if e is None: fail += 1; errs[r["task_id"]] = (r.get("error") or r.get("eager", {}).get("error", ""))[:70]; continue
    ok += 1
    if c: ratios.append(c / e)
print(f"== baselines: {ok} timed, {fail} failed/not run; compile/eager median {statistics.median(ratios) if ratios else 0:.3f} over {len(ratios)}")
for k, v in list(errs.items())[:12]: print("  ", k, v)
PYEOF
fi
say "== total $(elapsed)s"
cat $S | tail -60
