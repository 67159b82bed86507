#!/usr/bin/env bash
# Verdicts a second from one worker when evaluations arrive together, as a
# learning run's actors send them: verify-only and profiled jobs mixed, each
# candidate through the real worker core (sandbox_cli --concurrency), and with
# a learner-like process on the same GPU under the lease, how much of the GPU
# that process kept (docs/SANDBOX.md, "Who holds the GPU").
#
#   here:   tools/device_sandbox.sh --prepare      # stages .devcarry/sandbox
#           (and, to compare two designs in one call, another tree's sandbox_cli
#           and sandbox/harness under BEFORE=.devcarry/<dir>)
#   device: tests/bench/verdict_throughput.sh    (run tool, carry .devcarry/sandbox [BEFORE])
#
# Knobs: REPEAT (2 passes over the suite), WARM_WALL (200 s, the compiles), RUN_WALL (150 s a run, the worker's start-up probes included: ~36-39 s on an H200), CONCURRENCY (8 evaluations in flight),
# JOBS (2: VerifyLimits.parallel_verify_jobs), PROFILE_BUDGET (0.3 s), LOADS
# ("quiet lease": quiet, then the learner-like process holding the lease shared
# around each 20 GEMMs of 8192^2), BEFORE (a dir holding sandbox_cli and
# sandbox/harness of the design to compare with; empty: this tree only).
# Prints per design and load: the run's wall, verdicts a second, each stage's p50,
# outcomes, and under the lease the learner's GEMM batches a second against
# the same process alone for as long.
set -u
CARRY=.devcarry/sandbox
RESULTS=${OUT:-/tmp/verdict_throughput_out}
mkdir -p "$RESULTS"
# Every run's files here, packed into $RESULTS/runs.tgz at the end (the device tool returns a few files).
OUT=/tmp/kr_tp_out; rm -rf $OUT; mkdir -p $OUT
exec > >(tee "$RESULTS/summary.txt") 2>&1
trap 'tar czf "$RESULTS/runs.tgz" -C $OUT . 2>/dev/null' EXIT
PY=$(command -v python3)
export LD_LIBRARY_PATH=$PWD/$CARRY/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/kr_inductor
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

. tools/device_libs.sh
KPROF=$(device_build_kprof "$OUT/kprof_build.log") || KPROF=$PWD/$CARRY/libkprof_bazel.so

# The suite: small level-1 tasks and the level-2 GEMMs (0.1-3 ms kernels), each
# candidate once profiled and once verify-only (the agent's Profile and Verify tools).
SUITE=$OUT/suite.txt; : > "$SUITE"
for d in sandbox/solutions/level1/{100_HingeLoss,88_MinGPTNewGelu,94_MSELoss} sandbox/solutions/level2/*; do
  lvl=$(basename "$(dirname "$d")"); name=$(basename "$d")
  echo "$name $CARRY/kernelbench/$lvl/$name.py $d OK" >> "$SUITE"
  echo "$name $CARRY/kernelbench/$lvl/$name.py $d OK verify" >> "$SUITE"
done

worker() {  # $1: the harness dir
  echo "--set=backend=cuda --set=python=$PY --set=harness_dir=$(realpath "$1")
    --set=contain_lib=$PWD/$CARRY/libkernelrl_contain.so --set=verify_cuda_lib=$PWD/$CARRY/libkernelrl_verify_cuda.so
    --set=enable_profiling=true --set=kprof_lib=$KPROF --set=profiler_root=$PWD
    --set=baseline_dir=/tmp/kr_tp_no_baselines --set=verify.parallel_verify_jobs=${JOBS:-2}
    --set=profiler.time_budget_s=${PROFILE_BUDGET:-0.3} --set=verify.wall_seconds=60"
}

LEASE=/tmp/kr_tp.lease
load_start() {  # $1: log; $2: 1 = under the lease
  rm -f $LEASE $LEASE.turn $LEASE.shared_taken $LEASE.shared_released
  $PY tests/bench/gemm_load.py "$([ "$2" = 1 ] && echo $LEASE)" 0 "$1.count" > "$1" 2>&1 &
  LOADPID=$!
  for _ in $(seq 60); do grep -q running "$1" 2>/dev/null && break; sleep 1; done
}
load_stop() { kill "$LOADPID" 2>/dev/null; wait "$LOADPID" 2>/dev/null; cat "$1.count" 2>/dev/null; }

# Compiles once (the artifact cache is shared by every run below), so the runs time verdicts only.
timeout -k 10 "${WARM_WALL:-200}" "$CARRY/sandbox_cli" $(worker sandbox/harness) --set=work_root=/tmp/kr_tp_work \
  --suite="$SUITE" --concurrency=4 \
  > "$OUT/warm.txt" 2> "$OUT/warm.log"
echo "warm-up (compiles) rc=$? at $(elapsed) s: $(tail -2 "$OUT/warm.txt" | head -1)"

# The learner-like process alone, for the rate it keeps without verdicts.
if [[ "${LOADS:-quiet lease}" == *lease* ]]; then
  load_start "$OUT/alone.log" 1; sleep 20; ALONE=$(load_stop "$OUT/alone.log")
  echo "learner-like process alone: $ALONE (batches, seconds)"
fi

DESIGNS="after:$CARRY/sandbox_cli:sandbox/harness"
[ -n "${BEFORE:-}" ] && DESIGNS="before:$BEFORE/sandbox_cli:$BEFORE/sandbox/harness $DESIGNS"
for load in ${LOADS:-quiet lease}; do
  for design in $DESIGNS; do
    IFS=: read -r label cli harness <<< "$design"
    tag=$label-$load
    [ "$load" = lease ] && load_start "$OUT/$tag.load.log" 1
    timeout -k 10 "${RUN_WALL:-150}" "$cli" $(worker "$harness") --set=work_root=/tmp/kr_tp_work \
      $([ "$load" = lease ] && echo --set=gpu_lease_path=$LEASE) --suite="$SUITE" --repeat="${REPEAT:-2}" \
      --concurrency="${CONCURRENCY:-8}" --json_out="$OUT/$tag.jsonl" > "$OUT/$tag.txt" 2> "$OUT/$tag.log"
    rc=$?
    learner=""
    [ "$load" = lease ] && learner=$(load_stop "$OUT/$tag.load.log")
    echo "== $tag rc=$rc at $(elapsed) s${learner:+; learner-like process: $learner (batches, seconds)}"
    grep -E "^run:|^stage (total|gpu_queue|clock_queue|gpu_lease|verify|profile) " "$OUT/$tag.txt"
    awk 'NR>1 && $3 ~ /^[A-Z_]+$/ {n[$3]++} END {for (k in n) printf "  outcome %s %d\n", k, n[k]}' "$OUT/$tag.txt"
  done
done
echo "done at $(elapsed) s"
