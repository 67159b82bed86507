#!/usr/bin/env bash
# Sandbox checks on the GPU machine, in one go (docs/SANDBOX.md, "Device run").
#
#   here:   tools/device_sandbox.sh --prepare    # builds and fills .devcarry/sandbox
#   device: tools/device_sandbox.sh              # (run tool, carry .devcarry/sandbox)
#
# 1. builds the CUPTI recorder (libkprof.so, g++ like tools/device_profiler.sh;
#    falls back to the carried Bazel build);
# 2. measures eager + torch.compile baselines of the reference solutions' tasks
#    through the candidate's executor path (sandbox measure_baselines: the
#    task's Model and torch.compile(Model) in an executor process, timed by the
#    reference process's protocol, docs/HARNESS.md "Baselines"; torch.compile's
#    caches are filled in parallel first by the precompute's --warm_only, in the
#    background from the start) and imports them into a baseline cache;
# 3. runs the reference solutions (KernelBench level 1 and 2) and the CUDA
#    exploit suite through the real worker core (sandbox_cli: compile ->
#    isolated verify -> profile -> judge) with profiling on;
# 4. prints a table: outcome, reward, speed-ups, times per task;
# 4b. submits the coin-flip exploit 8 times through a worker with the verdict
#    cache on and checks the cache's rule (PASS / FAIL).
# Every step has a wall cap and the summary runs whatever happened before it;
# knobs (seconds): PRECOMPUTE_WALL (150, the executor-path baselines), SUITE_WALL
# (200), WALL (45, per verify+profile), PROFILE_BUDGET (0.5, timing per candidate),
# BASELINE_BUDGET (0.3, timing per baseline job), SKIP_BENCH (1:
# the compile benchmark is off unless SKIP_BENCH=0), PROFILE (1), EXPLOITS (1),
# SUITE_FILTER (regex on suite labels), SUITE_EXTRA (more suite lines), SUITE_REPEAT (1), PRECOMPUTE_ONLY (task ids, comma-separated),
# BASELINES (1; 0 skips step 2: every solution then says baseline_missing, for
# an exploit-only run), WARM_WALL (100, the torch.compile warm-up), GPU (0: the
# device index every step runs on, so another GPU of the machine can be busy),
# VERIFY_CUDA_TEST (1; 0 skips step 1b), CAPTURE (1: the graph-capture check, a candidate that declines CUDA graphs on a
# ~10 us ReLU against its captured twin, with that task's baselines; 0 skips it).
set -u
CARRY=.devcarry/sandbox
SOLUTIONS="sandbox/solutions"

if [ "${1:-}" = "--prepare" ]; then
  set -e
  SHARED=${KERNELRL_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
  bazel build //sandbox:sandbox_cli //sandbox:measure_baselines //sandbox/contain:libkernelrl_contain.so \
    //profiler_service:precompute_baselines //profiler_service:libkprof.so \
    //sandbox/harness/cuda:libkernelrl_verify_cuda.so
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib" "$CARRY/kernelbench/level1" "$CARRY/kernelbench/level2"
  cp bazel-bin/sandbox/sandbox_cli bazel-bin/sandbox/measure_baselines bazel-bin/sandbox/contain/libkernelrl_contain.so \
    bazel-bin/profiler_service/precompute_baselines "$CARRY/"
  cp bazel-bin/profiler_service/libkprof.so "$CARRY/libkprof_bazel.so"
  cp bazel-bin/sandbox/harness/cuda/libkernelrl_verify_cuda.so "$CARRY/"
  . tools/device_libs.sh
  device_stage_libs "$CARRY" "$CARRY/sandbox_cli" "$CARRY/measure_baselines" "$CARRY/precompute_baselines"
  for d in $SOLUTIONS/level1/* $SOLUTIONS/level2/*; do
    lvl=$(basename "$(dirname "$d")")
    cp "$SHARED/kernelbench/$lvl/$(basename "$d").py" "$CARRY/kernelbench/$lvl/"
  done
  du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-/tmp/sandbox_device_out}
mkdir -p "$OUT"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
PY=$(command -v python3)
CUDA=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$PWD/$CARRY/lib:${LD_LIBRARY_PATH:-}
# The harness's CUDA helpers (digest, compare, GPU output exchange); VERIFY_CUDA=0: the torch/file paths.
[ "${VERIFY_CUDA:-1}" = 1 ] && export KERNELRL_VERIFY_CUDA_LIB=$PWD/$CARRY/libkernelrl_verify_cuda.so
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
$PY -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'
PROFILE=${PROFILE:-1}
# The 6.4 GB-output elementwise tasks: measured and run last.
BIG="19_ReLU 21_Sigmoid 22_Tanh 25_Swish 32_HardTanh"
# torch.compile's caches, shared by the warm-up below and the baseline executors.
export TORCHINDUCTOR_CACHE_DIR=/tmp/kr_inductor TORCHINDUCTOR_COMPILE_THREADS=1

# 0. torch.compile of every task, in parallel and untimed, while steps 1-1b run:
#    the baseline executors of step 2 then load their compiled code.
GPU=${GPU:-0}
WARM=""
BASELINES=${BASELINES:-1}
[ "$PROFILE" = 1 ] || BASELINES=0
if [ "$BASELINES" = 1 ]; then
  ( CUDA_VISIBLE_DEVICES=$GPU PYTHONPATH=$PWD timeout "${WARM_WALL:-100}" $PY -m profiler_service.harness.precompute \
      --tasks_root "$CARRY/kernelbench" --out "$OUT/compile_warm.jsonl" --workers "${PRECOMPUTE_WORKERS:-6}" \
      --warm_only --deadline_s $(( ${WARM_WALL:-100} - 15 )) ${PRECOMPUTE_ONLY:+--only $PRECOMPUTE_ONLY} \
      > "$OUT/compile_warm.log" 2>&1 ) &
  WARM=$!
fi

# 1. CUPTI recorder for the candidate process (CUDA_INJECTION64_PATH).
KPROF=/tmp/kr_kprof/libkprof.so; mkdir -p /tmp/kr_kprof
CUPTI_H=$(dirname "$(find $CUDA/ $CUDA/extras -name cupti.h 2>/dev/null | head -1)")
CUPTI_SO=$(dirname "$(find $CUDA/ -name 'libcupti.so*' 2>/dev/null | head -1)")
if ! g++ -std=c++17 -O2 -fPIC -shared -I. -I$CUDA/include -I$CUPTI_H profiler_service/cupti/kprof.cc \
     -o $KPROF -L$CUPTI_SO -Wl,-rpath,$CUPTI_SO -L$CUDA/lib64/stubs -lcupti -lcuda > "$OUT/kprof_build.log" 2>&1; then
  echo "kprof g++ build FAILED (kprof_build.log); using the carried Bazel build"
  KPROF=$PWD/$CARRY/libkprof_bazel.so
fi
echo "kprof: $KPROF (at $(elapsed) s)"

# 1b. The harness's CUDA helpers against the torch code they replace.
if [ -n "${KERNELRL_VERIFY_CUDA_LIB:-}" ] && [ "${VERIFY_CUDA_TEST:-1}" = 1 ]; then
  CUDA_VISIBLE_DEVICES=$GPU timeout 180 $PY sandbox/harness/verify_cuda_test.py "$KERNELRL_VERIFY_CUDA_LIB" > "$OUT/verify_cuda_test.log" 2>&1
  echo "verify_cuda_test rc=$?: $(grep -c '^PASS' "$OUT/verify_cuda_test.log") passed, $(grep '^FAIL\|SKIPPED\|Error' "$OUT/verify_cuda_test.log" | head -5)"
fi

# The worker's settings (SandboxConfig fields, as for sandbox_main), shared by
# the baseline measurement (step 2) and the suite (step 4).
WORKER="--set=backend=cuda --set=gpu_index=$GPU --set=python=$PY --set=harness_dir=$PWD/sandbox/harness \
  --set=contain_lib=$PWD/$CARRY/libkernelrl_contain.so \
  ${KERNELRL_VERIFY_CUDA_LIB:+--set=verify_cuda_lib=$KERNELRL_VERIFY_CUDA_LIB}"
[ "$PROFILE" = 1 ] && WORKER="$WORKER --set=enable_profiling=true --set=kprof_lib=$KPROF --set=profiler_root=$PWD"

# 2. Baselines of the solutions' tasks: eager + torch.compile through the
#    executor path (the same CUPTI window, flush, inputs and outside clock as a
#    candidate), imported into the cache the worker reads. Tasks not reached
#    get no baseline (their verdicts say baseline_missing, reward 1).
BASE=/tmp/kr_baselines; rm -rf $BASE; mkdir -p $BASE
if [ "$BASELINES" = 1 ]; then
  [ -n "$WARM" ] && wait $WARM
  echo "compile warm-up done at $(elapsed) s: $(grep -c 'warm_only: compiled' "$OUT/compile_warm.log" 2>/dev/null) tasks compiled"
  # The suite's order: level 2, level 1, the 6.4 GB elementwise tasks last (a cut run keeps the first).
  ORDER=$(for d in $SOLUTIONS/level2/* $SOLUTIONS/level1/*; do
            case " $BIG " in *" $(basename "$d") "*) ;; *) echo "$(basename "$(dirname "$d")")/$(basename "$d")" ;; esac
          done; for b in $BIG; do echo "level1/$b"; done)
  timeout -k 10 "${PRECOMPUTE_WALL:-150}" "$CARRY/measure_baselines" $WORKER --set=work_root=/tmp/kr_baseline_work \
    --set=verify.wall_seconds=120 --set=profiler.time_budget_s="${BASELINE_BUDGET:-0.3}" \
    --tasks_root="$CARRY/kernelbench" --out="$OUT/baselines.jsonl" \
    --only="${PRECOMPUTE_ONLY:-$(echo $ORDER | tr ' ' ',')}" \
    > "$OUT/precompute.log" 2>&1
  echo "measure_baselines rc=$? at $(elapsed) s: $(wc -l < "$OUT/baselines.jsonl" 2>/dev/null || echo 0) tasks written"
  grep -E "^\[|measure_baselines:" "$OUT/precompute.log" | cut -c1-160
  "$CARRY/precompute_baselines" --measurements="$OUT/baselines.jsonl" --set=baseline_cache_dir=$BASE --table="$OUT/baselines.tsv" \
    2>&1 | tail -4
fi

# 2b. The graph-capture check's task (a ~10 us ReLU, where torch.compile's eager-timed
#     figure is mostly host cost): its baselines into the same cache. CAPTURE=0 skips it.
CAPTURE=${CAPTURE:-1}
[ "$PROFILE" = 1 ] || CAPTURE=0
if [ "$CAPTURE" = 1 ]; then
  rm -rf /tmp/kr_capture_tasks && mkdir -p /tmp/kr_capture_tasks/level1
  cp sandbox/testdata/gpu_tasks/sizes/relu_10us.py /tmp/kr_capture_tasks/level1/
  timeout -k 10 "${CAPTURE_BASELINE_WALL:-120}" "$CARRY/measure_baselines" $WORKER --set=work_root=/tmp/kr_capture_bw \
    --set=verify.wall_seconds=120 --set=profiler.time_budget_s="${BASELINE_BUDGET:-0.3}" \
    --tasks_root=/tmp/kr_capture_tasks --out="$OUT/capture_baselines.jsonl" > "$OUT/capture_baselines.log" 2>&1
  echo "capture check's baselines rc=$? at $(elapsed) s"
  "$CARRY/precompute_baselines" --measurements="$OUT/capture_baselines.jsonl" --set=baseline_cache_dir=$BASE \
    --table="$OUT/capture_baselines.tsv" 2>&1 | tail -2
fi

# 3. Compile benchmark (CPU cores) only on request: its figures are in docs/SANDBOX.md.
BENCH=""
if [ "${SKIP_BENCH:-1}" = 0 ]; then
  ( $PY tests/bench/sandbox_compile_bench.py --torch_builds "${TORCH_BUILDS:-2}" --out "$OUT/compile_bench.json" \
      > "$OUT/compile_bench.log" 2>&1 ) &
  BENCH=$!
fi

# 4. One suite, most important first (results are flushed per entry, so a run
#    cut short still reports what it finished): fixed overhead on a tiny ReLU,
#    the reference solutions (small outputs first), every exploit, honest code
#    again, then the 6.4 GB-output elementwise tasks.
SUITE=$OUT/suite.txt
: > "$SUITE"
for i in 1 2 3; do
  echo "overhead/relu_64x1024_$i sandbox/testdata/cpu_tasks/relu.py $SOLUTIONS/level1/19_ReLU OK" >> "$SUITE"
done
for d in $SOLUTIONS/level2/* $SOLUTIONS/level1/*; do
  case " $BIG " in *" $(basename "$d") "*) continue ;; esac
  lvl=$(basename "$(dirname "$d")")
  echo "$lvl/$(basename "$d") $CARRY/kernelbench/$lvl/$(basename "$d").py $d OK" >> "$SUITE"
done
# EXPLOITS=0 leaves the exploit suite out (a run that re-checks the solutions only).
[ "${EXPLOITS:-1}" = 1 ] && for d in sandbox/exploits/cuda/*; do
  exp=$(head -1 "$d/model_new.py" | sed -n 's/.*Expected verdict: \([A-Z_]*\).*/\1/p')
  echo "exploit/$(basename "$d") sandbox/testdata/gpu_tasks/relu.py $d $exp" >> "$SUITE"
done
# The trust-boundary exploits (a candidate that games its own timing): timed through the profile stage.
[ "${EXPLOITS:-1}" = 1 ] && [ "$PROFILE" = 1 ] && for d in sandbox/exploits/cuda_timing/*; do
  exp=$(head -1 "$d/model_new.py" | sed -n 's/.*Expected verdict: \([A-Z_]*\).*/\1/p')
  echo "timing/$(basename "$d") sandbox/testdata/gpu_tasks/relu.py $d $exp" >> "$SUITE"
done
# The candidate that declines CUDA graphs and its captured twin, interleaved (EXPECTED.md, "Graph-capture exploit").
[ "$CAPTURE" = 1 ] && for r in 1 2 3; do
  echo "capture/decline_r$r sandbox/testdata/gpu_tasks/sizes/relu_10us.py sandbox/exploits/cuda_graph/decline_capture OK"
  echo "capture/twin_r$r sandbox/testdata/gpu_tasks/sizes/relu_10us.py $SOLUTIONS/level1/19_ReLU OK"
done >> "$SUITE"
echo "after/gpu_relu_1GiB sandbox/testdata/gpu_tasks/relu.py $SOLUTIONS/level1/19_ReLU OK" >> "$SUITE"
for b in $BIG; do
  echo "level1/$b $CARRY/kernelbench/level1/$b.py $SOLUTIONS/level1/$b OK" >> "$SUITE"
done
# SUITE_EXTRA (a file of suite lines: label task workspace expected) adds to it.
[ -n "${SUITE_EXTRA:-}" ] && cat "$SUITE_EXTRA" >> "$SUITE"
# SUITE_FILTER (an extended regex on labels) keeps part of the suite.
if [ -n "${SUITE_FILTER:-}" ]; then
  grep -E "^(${SUITE_FILTER})" "$SUITE" > "$SUITE.kept" || true
  mv "$SUITE.kept" "$SUITE"
fi
# SUITE_REPEAT=N runs the whole (kept) suite N times, interleaved: an exploit
# and its honest twin side by side, N figures each.
if [ "${SUITE_REPEAT:-1}" -gt 1 ]; then
  for r in $(seq 1 "$SUITE_REPEAT"); do sed "s/^\([^ ]*\) /\1_r$r /" "$SUITE"; done > "$SUITE.rep"
  mv "$SUITE.rep" "$SUITE"
fi
PROFILE_FLAGS=""
[ "$PROFILE" = 1 ] && PROFILE_FLAGS="--set=baseline_dir=$BASE --set=profiler.time_budget_s=${PROFILE_BUDGET:-0.5}"
CLI="$CARRY/sandbox_cli $WORKER $PROFILE_FLAGS"
( sleep 30; cp /tmp/kr_suite/zygote.log "$OUT/zygote.log" 2>/dev/null ) &
echo "suite starts at $(elapsed) s"
timeout "${SUITE_WALL:-200}" $CLI --suite="$SUITE" --json_out="$OUT/verdicts.jsonl" --set=work_root=/tmp/kr_suite \
  --set=verify.wall_seconds="${WALL:-45}" 2> "$OUT/suite_stderr.log" | tee "$OUT/suite_table.txt"
SUITE_RC=${PIPESTATUS[0]}
echo "suite rc=$SUITE_RC at $(elapsed) s (124 = cut by SUITE_WALL)"
cp /tmp/kr_suite/zygote.log "$OUT/zygote.log" 2>/dev/null
grep -h "^W \|profiling on" "$OUT/suite_stderr.log" | head -5  # common/log.h: W = warning
grep -h "CUPTI recorder" "$OUT/zygote.log" 2>/dev/null | head -2

[ -n "$BENCH" ] && wait $BENCH && tail -8 "$OUT/compile_bench.log"

# 4b. The coin flip through the verdict cache (sandbox/exploits/EXPECTED.md):
#     8 submissions of the same bytes to one worker with the cache on, each
#     entry served once. The rule: a served verdict only after >= 2 fresh
#     verdicts of those bytes, all with its outcome and reward. COIN=0 skips it.
if [ "${COIN:-1}" = 1 ]; then
  for i in 1 2 3 4 5 6 7 8; do
    echo "cache/coin_flip_$i sandbox/testdata/gpu_tasks/relu.py sandbox/exploits/cuda_cache/coin_flip OK"
  done > "$OUT/coin.txt"
  timeout "${COIN_WALL:-120}" $CLI --suite="$OUT/coin.txt" --json_out="$OUT/coin.jsonl" --set=work_root=/tmp/kr_coin \
    --set=verify.wall_seconds="${WALL:-45}" --set=verdict_cache.max_entries=64 --set=verdict_cache.max_uses=1 \
    > "$OUT/coin_table.txt" 2> "$OUT/coin_stderr.log"
  echo "coin flip suite rc=$? at $(elapsed) s (non-zero whenever the coin said HACK)"
  $PY - "$OUT/coin.jsonl" <<'PYEOF'
import json, sys
fresh, bad, served = [], [], 0
for line in open(sys.argv[1]):
    v = json.loads(line)["verdict"]
    seen = (v.get("outcome"), v.get("reward", 0))
    if not v.get("cached"):
        fresh.append(seen)
        continue
    served += 1
    if len(fresh) < 2 or any(f != seen for f in fresh):
        bad.append(f"served {seen} after fresh {fresh}")
print(f"coin flip through the verdict cache: {len(fresh)} fresh "
      f"({', '.join(f'{o} r={r:g}' for o, r in fresh)}), {served} served: {'FAIL ' + '; '.join(bad) if bad else 'PASS'}")
PYEOF
fi

# 5. Summary table (runs on whatever the steps above left).
$PY - "$OUT" <<'PYEOF'
import json, sys, statistics
out = sys.argv[1]
rows = []
try:
    for line in open(f"{out}/verdicts.jsonl"):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
except OSError as e:
    print("no verdicts:", e)
def stage(v, name):
    return next((s.get("wall_ms", 0.0) for s in v.get("stages", []) if s["stage"] == name), 0.0)
ok = lambda r: r["verdict"].get("outcome") == r["expected"]
sol = [r for r in rows if r["label"].startswith("level")]
exp = [r for r in rows if r["label"].startswith("exploit/")]
print("\n== profile stage on the reference solutions ==")
print(f"{'task':42s} {'outcome':14s} {'rwd':>4s} {'cand_us':>10s} {'eager_us':>10s} {'comp_us':>10s} "
      f"{'x_eager':>8s} {'x_comp':>8s} {'sol':>6s} {'own%':>5s} {'prof_s':>6s}  flags")
for r in sol + [r for r in rows if r["label"].startswith(("overhead/", "after/"))]:
    v = r["verdict"]
    cov = v.get("coverage", {})
    own = 100 * cov.get("own_kernel_us", 0) / cov["total_gpu_us"] if cov.get("total_gpu_us") else 0
    print(f"{r['label'][:42]:42s} {v.get('outcome','?')[:14]:14s} {v.get('reward', 0):4.0f} "
          f"{v.get('candidate_time_us', 0):10.1f} {v.get('eager_time_us', 0):10.1f} {v.get('compile_time_us', 0):10.1f} "
          f"{v.get('speedup_vs_eager', 0):8.3f} {v.get('speedup_vs_compile', 0):8.3f} "
          f"{v.get('speed_of_light_ratio', 0):6.2f} {own:5.0f} {stage(v, 'profile')/1e3:6.2f}  "
          f"{','.join(v.get('flags', []))[:70]}")
print("\n== sandbox device summary ==")
print(f"solutions OK: {sum(map(ok, sol))}/{len(sol)}  (level1 {sum(ok(r) for r in sol if r['label'].startswith('level1/'))}, "
      f"level2 {sum(ok(r) for r in sol if r['label'].startswith('level2/'))})")
rewards = [r["verdict"].get("reward", 0) for r in sol if ok(r)]
if rewards:
    print("rewards of correct solutions: " + ", ".join(f"{k}: {rewards.count(k)}" for k in (3, 2, 1)))
    print(f"profiled with a baseline: {sum(1 for r in sol if ok(r) and r['verdict'].get('eager_time_us', 0) > 0)}/{len(rewards)}; "
          f"quarantined: {sum(1 for r in sol if r['verdict'].get('quarantined'))}; "
          f"cupti_inactive: {sum(1 for r in sol if 'cupti_inactive' in r['verdict'].get('flags', []))}")
via = sum(1 for r in sol if "through the executor path" in r["verdict"].get("logs", {}).get("profile", ""))
print(f"solutions judged against baselines timed through the executor path: {via}/{len(sol)}")
print(f"exploits with the expected verdict: {sum(map(ok, exp))}/{len(exp)}")
tim = [r for r in rows if r["label"].startswith("timing/")]
if tim:
    held = lambda v: v.get("outcome") != "OK" or (v.get("reward", 0) <= 1 and bool(v.get("flags")))
    print(f"trust-boundary exploits with the expected verdict: {sum(map(ok, tim))}/{len(tim)}; "
          f"non-OK or held at reward <= 1 with a flag: {sum(held(r['verdict']) for r in tim)}/{len(tim)}")
    for r in tim:
        v = r["verdict"]
        print(f"  {r['label'][:30]:30s} {v.get('outcome','?'):14s} reward {v.get('reward', 0):3.0f} "
              f"{','.join(v.get('flags', []))[:60]}  {v.get('summary','')[:90]}")
cap = [r for r in rows if r["label"].startswith("capture/")]
if cap:
    # The rule: declining capture never reads faster than the captured twin, nor pays more.
    dec = [r["verdict"] for r in cap if "/decline" in r["label"]]
    twin = [r["verdict"] for r in cap if "/twin" in r["label"]]
    print("\n== graph capture declined (relu_10us): the candidate against its captured twin ==")
    for r in cap:
        v = r["verdict"]
        eager_timed = v.get("compile_time_us", 0) / v["candidate_time_us"] if v.get("candidate_time_us") else 0
        print(f"  {r['label']:18s} {v.get('outcome','?'):10s} reward {v.get('reward', 0):3.0f} cand {v.get('candidate_time_us', 0):7.1f} us "
              f"graph {v.get('candidate_graph_time_us', 0):6.1f} us | compile eager-timed {v.get('compile_time_us', 0):7.1f} "
              f"graph {v.get('compile_graph_time_us', 0):6.1f} us | x_compile {v.get('speedup_vs_compile', 0):.3f} "
              f"(eager with eager: {eager_timed:.3f}) {','.join(v.get('flags', []))[:80]}")
    ok_runs = lambda vs: [v for v in vs if v.get("outcome") == "OK"]
    d, t = ok_runs(dec), ok_runs(twin)
    fails = []
    if not d or not t:
        fails.append(f"{len(d)} of {len(dec)} declining and {len(t)} of {len(twin)} twin verdicts OK")
    else:
        if any(v.get("candidate_graph_time_us", 0) > 0 for v in d):
            fails.append("a declining candidate was graph-replayed (its capture did not fail)")
        if any("held_to_baseline_graph" not in v.get("flags", []) for v in d):
            fails.append("a declining candidate was not held to the baseline's graph figure")
        best_twin = max(v.get("speedup_vs_compile", 0) for v in t)
        if max(v.get("speedup_vs_compile", 0) for v in d) > best_twin:
            fails.append(f"declining read faster vs compile than the twin's best {best_twin:.3f}")
        if max(v.get("reward", 0) for v in d) > max(v.get("reward", 0) for v in t):
            fails.append("declining paid more than the twin")
    print(f"graph capture declined: {'PASS' if not fails else 'FAIL ' + '; '.join(fails)}")
print("\n== trusted vs in-process time (honest solutions) ==")
for r in sol + [r for r in rows if r["label"].startswith(("overhead/", "after/"))]:
    line = r["verdict"].get("logs", {}).get("profile", "")
    if line:
        print(f"  {r['label'][:40]:40s} {line[:200]}")
for r in rows:
    if not ok(r):
        print(f"  MISMATCH {r['label']}: expected {r['expected']} got {r['verdict'].get('outcome')}: {r['verdict'].get('summary','')[:160]}")
print("\n== verdict flags (reward, quarantined) of every exploit and solution ==")
for r in rows:
    v = r["verdict"]
    print(f"  {r['label'][:40]:40s} {v.get('outcome','?'):16s} r={v.get('reward', 0):g} q={int(bool(v.get('quarantined')))} "
          f"{','.join(v.get('flags', []))[:160]}")
l1 = [stage(r["verdict"], "verify") for r in sol if r["label"].startswith("level1/") and ok(r)]
if l1:
    print(f"verify wall, level-1 KernelBench tasks: p50 {statistics.median(l1)/1e3:.2f} s  (n={len(l1)})")
pr = [stage(r["verdict"], "profile") for r in sol if ok(r) and stage(r["verdict"], "profile") > 0]
if pr:
    print(f"profile stage wall: p50 {statistics.median(pr)/1e3:.2f} s max {max(pr)/1e3:.2f} s (n={len(pr)})")
ov = [stage(r["verdict"], "verify") for r in rows if r["label"].startswith("overhead/")][1:]
if ov:
    print(f"verify wall, tiny ReLU (fixed overhead): p50 {statistics.median(ov)/1e3:.2f} s  (n={len(ov)})")
print("\n== where verify time goes (timing/timeline lines of each verdict's contain log) ==")
for r in rows:
    if r["label"].startswith(("overhead/", "level1/", "level2/")):
        lines = [l for l in r["verdict"].get("logs", {}).get("contain", "").splitlines() if l.startswith(("timing:", "timeline:", "output exchange:"))]
        print(f"{r['label'][:42]} verify {stage(r['verdict'], 'verify'):.0f} ms")
        for l in lines:
            print("    " + l[:400])
try:
    b = json.load(open(f"{out}/compile_bench.json"))["summary"]
    for k, v in b.items():
        print(f"bench {k:12s} n={v['n']} p50 {v['p50_s']:.2f} s p90 {v['p90_s']:.2f} s ratio vs load_inline p50: {v['ratio_vs_load_inline_p50']}")
except Exception:
    pass
PYEOF
echo "total $(elapsed) s"
# At most 8 files come back from the device: the rest travel as one archive.
( cd "$OUT" && tar czf extra_logs.tgz --exclude=run.log --exclude=extra_logs.tgz --exclude='*.tsv' \
    $(ls | grep -v -e '^run.log$' -e '^suite_table.txt$' -e '^baselines.tsv$' -e '^extra_logs.tgz$') 2>/dev/null \
  && ls | grep -v -e '^run.log$' -e '^suite_table.txt$' -e '^baselines.tsv$' -e '^extra_logs.tgz$' | xargs -r rm -rf )
exit $SUITE_RC
