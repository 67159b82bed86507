#!/usr/bin/env bash
# The trusted figure against the in-process one for honest kernels of ~10 us,
# ~100 us, ~1 ms, ~3 ms and ~10 ms, and the verdicts they get, on a quiet GPU and on
# a GPU that a second process keeps busy (docs/HARNESS.md, "Tolerances").
#
#   here:   tools/device_sandbox.sh --prepare       # stages .devcarry/sandbox
#   device: LOAD=0 tests/bench/trusted_timing_h100.sh   (run tool, carry .devcarry/sandbox)
#           LOAD=1 ...                              # the same with a busy GPU
#           LOAD=both ...                           # quiet, then busy (baselines once)
#
# Per size it prints: evaluations, outcomes, non-info flags, the trusted
# per-forward figure (median), the executor's own CUPTI figure (median), their
# ratio, forwards per block, and the verify + profile wall (p50). Knobs: REPEAT
# (50 evaluations per size), PROFILE_BUDGET (0.3 s), CUPTI (1; 0 leaves the recorder out), LOAD (0: quiet; 1: a second
# process runs 8192^2 GEMMs back to back the whole time; both: one then the
# other; lease: the same process holds the worker's GPU lease shared around
# each 20 GEMMs, as a learner on the GPU does, stamping
# its takes and releases; LOAD_IDLE_S: seconds it rests between batches, as a learner waiting for rollouts), SIZES (a regex on the size labels), HARNESS (the harness directory,
# default sandbox/harness: another tree's, to compare two designs in one call;
# OUT then keeps them apart), EXTRA (more --set flags for every run, e.g. the
# other design's profiler knobs), BASELINES_AFTER (1: measure the baselines
# again after the suites). Each suite ends with the
# device_shared check: quiet, no verdict declined for sharing; loaded, every
# verdict declined (INFRA_ERROR, device_shared) and none blamed.
set -u
CARRY=.devcarry/sandbox
OUT=${OUT:-/tmp/trusted_timing_out}
mkdir -p "$OUT"
PY=$(command -v python3)
export LD_LIBRARY_PATH=$PWD/$CARRY/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/kr_inductor TORCHINDUCTOR_COMPILE_THREADS=1
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

. tools/device_libs.sh
KPROF=$(device_build_kprof "$OUT/kprof_build.log") || KPROF=$PWD/$CARRY/libkprof_bazel.so
# CUPTI=0: no recorder in the executor (events attribute instead), to see what it costs.
[ "${CUPTI:-1}" = 1 ] || KPROF=""
WORKER="--set=backend=cuda --set=python=$PY --set=harness_dir=$(realpath ${HARNESS:-sandbox/harness})
  --set=contain_lib=$PWD/$CARRY/libkernelrl_contain.so --set=verify_cuda_lib=$PWD/$CARRY/libkernelrl_verify_cuda.so
  --set=enable_profiling=true --set=kprof_lib=$KPROF --set=profiler_root=$PWD ${EXTRA:-}"

# The sizes: label, task, honest solution.
SIZES_ALL="relu_10us:relu_10us.py:sandbox/solutions/level1/19_ReLU
relu_100us:relu_100us.py:sandbox/solutions/level1/19_ReLU
relu_1ms:relu_1ms.py:sandbox/solutions/level1/19_ReLU
matmul_3ms:matmul_tiled_3ms.py:sandbox/testdata/gpu_solutions/matmul_tiled
matmul_10ms:matmul_tiled_10ms.py:sandbox/testdata/gpu_solutions/matmul_tiled"
TASKS=/tmp/kr_sizes/level1; rm -rf /tmp/kr_sizes; mkdir -p $TASKS
SUITE=$OUT/suite.txt; : > "$SUITE"
for row in $SIZES_ALL; do
  IFS=: read -r label task ws <<< "$row"
  [[ "$label" =~ ${SIZES:-.} ]] || continue
  cp sandbox/testdata/gpu_tasks/sizes/$task $TASKS/
  echo "$label sandbox/testdata/gpu_tasks/sizes/$task $ws OK" >> "$SUITE"
done

# Baselines through the executor path (the same blocks and trusted clock).
BASE=/tmp/kr_size_baselines; rm -rf $BASE; mkdir -p $BASE
measure_baselines() {  # $1: the file's name under OUT
  timeout -k 10 "${PRECOMPUTE_WALL:-200}" "$CARRY/measure_baselines" $WORKER --set=work_root=/tmp/kr_size_bw \
    --set=verify.wall_seconds=120 --set=profiler.time_budget_s=0.5 --tasks_root=/tmp/kr_sizes \
    --out="$OUT/$1.jsonl" > "$OUT/$1.log" 2>&1
  echo "$1 rc=$? at $(elapsed) s"; grep -E "^\[" "$OUT/$1.log" | cut -c1-200
}
measure_baselines baselines
"$CARRY/precompute_baselines" --measurements="$OUT/baselines.jsonl" --set=baseline_cache_dir=$BASE \
  --table="$OUT/baselines.tsv" 2>&1 | tail -2

# One suite (quiet or with a second process keeping the GPU busy), then its summary.
run_suite() {
  local load=$1 out="$OUT/load$1" loadpid="" lease=""
  mkdir -p "$out"
  # LOAD=lease: the second process takes the worker's GPU lease (common/gpu_lease.h) shared around
  # each batch of its GEMMs, as the learner does around its steps: verdicts are judged, not declined.
  [ "$load" = lease ] && lease=/tmp/kr_gpu.lease && rm -f $lease $lease.turn $lease.shared_taken $lease.shared_released
  if [ "$load" = 1 ] || [ "$load" = lease ]; then
    # A second process on the same GPU, busy the whole time (its own CUDA context).
    $PY tests/bench/gemm_load.py "$lease" "${LOAD_IDLE_S:-0}" > "$out/load.log" 2>&1 &
    loadpid=$!
    sleep 5
    head -1 "$out/load.log"
  fi
  echo "suite ($(wc -l < "$SUITE") sizes x ${REPEAT:-50}, load=$load) starts at $(elapsed) s"
  timeout "${SUITE_WALL:-480}" "$CARRY/sandbox_cli" $WORKER --set=baseline_dir=$BASE ${lease:+--set=gpu_lease_path=$lease} \
    --set=profiler.time_budget_s="${PROFILE_BUDGET:-0.3}" --set=work_root=/tmp/kr_size_suite \
    --set=verify.wall_seconds=60 --suite="$SUITE" --repeat="${REPEAT:-50}" --json_out="$out/verdicts.jsonl" \
    > "$out/suite_table.txt" 2> "$out/suite_stderr.log"
  echo "suite rc=$? at $(elapsed) s"
  [ -n "$loadpid" ] && kill "$loadpid" 2>/dev/null && wait "$loadpid" 2>/dev/null
  [ -n "$loadpid" ] && tail -1 "$out/load.log"

  $PY - "$out" "$load" <<'PYEOF'
import json, os, re, statistics, sys, collections
out, load = sys.argv[1], sys.argv[2]
info = {"rse_above_target", "in_process_below_trusted", "events_above_cupti", "compile_baseline_missing",
        "cupti_inactive", "wall_vs_events_mismatch"}
rows = collections.defaultdict(list)
for line in open(f"{out}/verdicts.jsonl"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    rows[r["label"]].append(r["verdict"])
print(f"\nload={load}: size | n | outcomes | non-info flags | trusted us p50 | in-process us p50 | ratio p50 | "
      f"graph-replayed trusted us p50 | graph / in-process p50 | last graph block / executor's replay wall p50 | forwards | "
      f"verify+profile wall s p50 | reward | speed-up modes")
for label, vs in rows.items():
    outcomes = collections.Counter(v.get("outcome", "?") for v in vs)
    flags = collections.Counter(f for v in vs for f in v.get("flags", []) if f not in info)
    trusted, inproc, ratio, fw, walls, graph, gratio, wratio = [], [], [], [], [], [], [], []
    modes = collections.Counter()
    for v in vs:
        prof = (v.get("logs") or {}).get("profile", "")
        m = re.search(r"in-process \(attribution\): ([0-9.]+) us", prof)
        f = re.search(r"blocks of (\d+) forwards", prof)
        t = v.get("candidate_time_us") or 0
        if t and m and float(m.group(1)) > 0:
            trusted.append(t); inproc.append(float(m.group(1))); ratio.append(t / float(m.group(1)))
        g = v.get("candidate_graph_time_us") or 0
        if g:
            graph.append(g)
            if m and float(m.group(1)) > 0:
                gratio.append(g / float(m.group(1)))
            # The last graph block alone: its trusted figure from its phases against the executor's own
            # host-clock wall around its replay (the switch into its context, launch gaps and sync
            # included): what the protocol adds on top of the candidate process's own time.
            gb = re.search(r"graph-replayed: [0-9.]+ us per forward \(median of \d+ blocks of (\d+) forwards\)", prof)
            cp = re.search(r"copies ([0-9.]+) us taken off", prof)
            ph = re.search(r"last graph block: inputs in (\d+) us, forwards to done (\d+) us \(executor's own wall "
                           r"(\d+) us[^)]*\), locate (\d+) us [^;]*seal (\d+) us", prof)
            if gb and cp and ph and int(ph.group(3)) > 0:
                n, (inputs, to_done, own, locate, seal) = int(gb.group(1)), (int(x) for x in ph.groups())
                wratio.append(((inputs + to_done + locate + seal) / n - float(cp.group(1))) / (own / n))
        modes["eager:" + ("graph" if v.get("speedup_vs_eager_graph") else "eager")] += 1
        if f:
            fw.append(int(f.group(1)))
        st = {s["stage"]: s.get("wall_ms", 0) for s in v.get("stages", [])}
        walls.append((st.get("verify", 0) + st.get("profile", 0)) / 1e3)
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    rewards = collections.Counter(v.get("reward", 0) for v in vs)
    print(f"{label} | {len(vs)} | {dict(outcomes)} | {dict(flags)} | {med(trusted):.2f} | {med(inproc):.2f} | "
          f"{med(ratio):.3f} | {med(graph):.2f} | {med(gratio):.3f} | {med(wratio):.3f} | {med(fw)} | {med(walls):.2f} | "
          f"{dict(rewards)} | "
          f"{dict(modes)}")
    # Where the reference process's wall goes (its timeline, in the contain log), p50 per step.
    steps = collections.defaultdict(list)
    for v in vs:
        line = re.search(r"timeline: reference [^:]*: (.*)", (v.get("logs") or {}).get("contain", ""))
        for name, ms in re.findall(r"([a-z_]+) ([0-9.]+)", line.group(1) if line else ""):
            steps[name].append(float(ms))
    if steps:
        print(f"  {label} reference steps, ms p50: " + ", ".join(f"{k} {med(x):.0f}" for k, x in steps.items()))
    waits = [s.get("wall_ms", 0) for v in vs for s in v.get("stages", []) if s["stage"] == "gpu_lease"]
    if waits:
        print(f"  {label} waited for the GPU lease: {len(waits)} verdicts, ms p50 {med(waits):.1f}, max {max(waits):.1f}")
    # Block to block within an evaluation (the profile log lists every block's figure), and the
    # baselines' graph blocks this size is compared with: an odd block, or a baseline unlike the
    # candidates, shows here.
    spread = []
    for v in vs:
        listed = re.search(r"blocks \(trusted us a forward; e eager, g graph\): ([^;]*)", (v.get("logs") or {}).get("profile", ""))
        g = [float(x) for x in re.findall(r"g([0-9.]+)", listed.group(1))] if listed else []
        if len(g) >= 2:
            spread.append(max(g) / min(g))
    base = {}
    try:
        for line in open(os.path.join(os.path.dirname(out), "baselines.jsonl")):
            b = json.loads(line)
            if b.get("task_id", "").endswith("/" + label):
                base = {k: [round(x["trusted_us"], 1) for x in (b.get(k) or {}).get("samples", []) if x.get("graph")]
                        for k in ("eager", "compiled")}
    except (OSError, ValueError):
        pass
    if spread or base:
        print(f"  {label} graph blocks: slowest / fastest within an evaluation p50 {med(spread):.3f}; "
              f"the baselines' graph blocks (us a forward): {base}")
    notes = collections.Counter(n for v in vs for n in re.findall(r"graph: ([^;\n]{0,120})", (v.get("logs") or {}).get("profile", "")))
    if notes:
        print(f"  {label} graph notes: {dict(notes)}")
# The device_shared check: with the load every honest verdict is declined
# (INFRA_ERROR, device_shared), none is blamed (HACK_DETECTED, WRONG_ANSWER,
# a hack or audit flag) or paid; quiet, none is declined for sharing.
allv = [v for vs in rows.values() for v in vs]
shared = sum("device_shared" in v.get("flags", []) for v in allv)
declined = sum(v.get("outcome") == "INFRA_ERROR" and "device_shared" in v.get("flags", []) for v in allv)
blamed = sum(v.get("outcome") in ("HACK_DETECTED", "WRONG_ANSWER", "CRASH") or bool(v.get("quarantined"))
             for v in allv)
paid = sum(v.get("outcome") == "OK" for v in allv)
if load == "1":
    ok = declined == len(allv) and blamed == 0
    print(f"device_shared check (load): {declined}/{len(allv)} declined as device_shared, {paid} judged OK, "
          f"{blamed} blamed -> {'PASS' if ok else 'FAIL'}")
else:
    ok = shared == 0 and blamed == 0
    print(f"device_shared check ({'quiet' if load == '0' else 'load under the lease'}): {shared}/{len(allv)} flagged "
          f"device_shared, {paid} judged OK, {blamed} blamed -> {'PASS' if ok else 'FAIL'}")
checks = collections.Counter(re.sub(r"[:(].*", "", (v.get("logs") or {}).get("profile", "").split("gpu share ")[-1])
                             for v in allv if "gpu share " in (v.get("logs") or {}).get("profile", ""))
if checks:
    print(f"how the share check ran: {dict(checks)}")
PYEOF
}

case "${LOAD:-0}" in
  both) run_suite 0; run_suite 1 ;;
  *) run_suite "${LOAD:-0}" ;;
esac
# BASELINES_AFTER=1: the baselines measured again after the suites (the same
# tasks, a fresh worker): whether a difference between the baselines' blocks
# and the candidates' belongs to the time they ran or to the path.
[ "${BASELINES_AFTER:-0}" = 1 ] && measure_baselines baselines_after
# Our own phases, candidate blocks against the baselines' graph blocks (p50,
# us a block): the same bytes copied and sealed should take the same time.
$PY - "$OUT" <<'PYEOF'
import collections, glob, json, os, re, statistics, sys
out = sys.argv[1]
med = lambda xs: round(statistics.median(xs)) if xs else None
rows = collections.defaultdict(list)
for f in sorted(glob.glob(f"{out}/baselines*.jsonl")):
    for line in open(f):
        b = json.loads(line)
        for k in ("eager", "compiled"):
            for x in (b.get(k) or {}).get("samples", []):
                if x.get("graph"):
                    rows[(b["task_id"].split("/")[-1], os.path.basename(f)[:-6] + ":" + k)].append(x)
for f in sorted(glob.glob(f"{out}/load0/verdicts.jsonl")):
    for line in open(f):
        r = json.loads(line)
        p = (r["verdict"].get("logs") or {}).get("profile", "")
        m = re.search(r"last graph block: inputs in (\d+) us, forwards to done (\d+) us.*?seal (\d+) us"
                      r"(?: \(GPU: inputs (\d+) us, seal (\d+) us(?:; ([0-9.]+) us a forward taken off)?)?", p)
        if m:
            g = [float(x) if x else 0 for x in m.groups()]
            rows[(r["label"], "candidate")].append({"inputs_us": g[0], "forwards_us": g[1], "seal_us": g[2],
                                                   "inputs_gpu_us": g[3], "seal_gpu_us": g[4], "seal_off_us": g[5]})
print("\nour phases in graph blocks, us a block p50: size | who | n | inputs (GPU) | forwards to done | "
      "seal (GPU) | taken off for the seal, us a forward")
for (label, who), xs in sorted(rows.items()):
    q = lambda k: med([x.get(k, 0) for x in xs])
    off = statistics.median([x.get("seal_off_us", 0) for x in xs]) if xs else 0
    print(f"{label} | {who} | {len(xs)} | {q('inputs_us')} ({q('inputs_gpu_us')}) | {q('forwards_us')} | "
          f"{q('seal_us')} ({q('seal_gpu_us')}) | {off:.2f}")
PYEOF
echo "done at $(elapsed) s"
