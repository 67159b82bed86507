#!/usr/bin/env bash
# Profiler device checks (issue 5) in one call; see docs/PROFILER.md.
#   1. build libkprof.so (g++, CUPTI) and the test kernels (nvcc, sm_90);
#   2. measure the ceilings used for speed of light (D2D copy, bf16 GEMM);
#   3. CUPTI medians of 6 kernels, CV of 10 repeated profiles, exploit cases;
#   4. ncu gpu__time_duration of the same kernels (clocks and caches as ours);
#   5. baseline precompute over .devcarry/kernelbench level1+level2 until the deadline.
# Results under $OUT (at most 8 files); a short table last.
set -u
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

timeout 60 $PY - <<'PYEOF' 2>&1 | tee -a $S
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

CUDA_INJECTION64_PATH=$B/libkprof.so KERNELRL_TEST_KERNELS=$B/libkt.so timeout 200 \
  $PY -m profiler_service.harness.device.checks cupti $OUT > $OUT/checks.log 2>&1 || say "checks rc=$?"
tail -25 $OUT/checks.log
say "== cupti checks done at $(elapsed)s"

KERNELRL_TEST_KERNELS=$B/libkt.so timeout 150 ncu --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --clock-control none \
  --cache-control all --csv -k regex:'vec_add|scale_shift|transpose_naive|row_sum|fma_loop|matmul_tiled' \
  $PY -m profiler_service.harness.device.checks ncu_target > $OUT/ncu.csv 2>&1 || say "ncu rc=$?"
$PY - $OUT <<'PYEOF' 2>&1 | tee -a $S
import csv, json, statistics, sys, collections
out = sys.argv[1]
ours = json.load(open(f"{out}/cupti_kernels.json"))
rows = [l for l in open(f"{out}/ncu.csv") if l.startswith('"')]
t = collections.defaultdict(list); clk = collections.defaultdict(list)
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
first_mode = next(iter(ours))
for r in csv.DictReader(rows):
    name = next((k for k in ours[first_mode] if k in r["Kernel Name"]), None)
    if name and r.get("Metric Name") == "sm__cycles_elapsed.avg.per_second":
        v = float(r["Metric Value"].replace(",", "")); u = r["Metric Unit"]
        clk[name].append(v * {"cycle/nsecond": 1e3, "cycle/usecond": 1.0, "cycle/second": 1e-6, "Ghz": 1e3, "Mhz": 1.0}.get(u, 1.0))
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    if name: t[name].append(float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1.0))
for mode, kern in ours.items():
    print(f"== CUPTI ({mode} flush) vs ncu gpu__time_duration (medians, us)")
    res = {}
    for k, v in kern.items():
        if not t[k]: print(f"{k:16s} cupti {v['cupti_median_us']:9.2f}  ncu: none"); continue
        n = statistics.median(t[k]); d = (v["cupti_median_us"] - n) / n
        res[k] = d
        print(f"{k:16s} cupti {v['cupti_median_us']:9.2f}  ncu {n:9.2f}  diff {d*100:+6.2f}%  n={len(t[k])}"
              f"  sm MHz ours {v.get('sm_clock_mhz', 0):.0f} ncu {statistics.median(clk[k]) if clk[k] else 0:.0f}")
    print(f"within 3% ({mode} flush): {sum(abs(d) <= 0.03 for d in res.values())}/{len(res)}")
cv = json.load(open(f"{out}/cv.json"))
print(f"== CV of 10 profiles of {cv['kernel']} (~{statistics.mean(cv['medians_us']):.1f} us): {cv['cv']*100:.3f}%")
PYEOF
say "== ncu done at $(elapsed)s"

LEFT=$(( TOTAL_S - $(elapsed) - 45 ))
say "== precompute: $LEFT s"
if [ -d .devcarry/kernelbench ] && [ $LEFT -gt 60 ] && [ -z "${SKIP_PRECOMPUTE:-}" ]; then
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
cat $S | tail -40
