#!/usr/bin/env bash
# `kernelrl eval` on the GPU machine: the scripted policy (the repository's
# reference solutions, sandbox/solutions/level{1,2}: 15 KernelBench tasks)
# drives the whole agent loop against a real sandbox worker (sandbox_main,
# CUDA backend, profiling on) over gRPC, and writes the Table-1 report.
#
#   here:   tools/device_actor.sh --prepare      # builds and fills .devcarry/actor
#   device: tools/device_actor.sh                # (run tool, carry .devcarry/actor)
#
# Steps on the device: CUPTI recorder (g++), eager + torch.compile baselines of
# the 15 tasks (through the executor path: measure_baselines after a parallel
# torch.compile warm-up, as tools/device_sandbox.sh; only such baselines pay
# speed-ups), a sandbox
# worker on a free port, `kernelrl eval` with concurrent rollouts, then
# $OUT/eval/{report.json,report.md,speedups.png,outcomes.png} and the logs.
# Knobs: WARM_WALL (100 s), PRECOMPUTE_WALL (150 s), EVAL_WALL (420 s), ROLLOUTS (4 concurrent),
# PROFILE_BUDGET (0.5 s of timing per candidate).
set -u
CARRY=.devcarry/actor

if [ "${1:-}" = "--prepare" ]; then
  set -e
  SHARED=${KERNELRL_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
  bazel build //tools/cli:kernelrl //sandbox:sandbox_main //sandbox/contain:libkernelrl_contain.so \
    //sandbox:measure_baselines //profiler_service:precompute_baselines //profiler_service:libkprof.so \
    //sandbox/harness/cuda:libkernelrl_verify_cuda.so
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib" "$CARRY/kernelbench/level1" "$CARRY/kernelbench/level2" "$CARRY/tok"
  cp bazel-bin/tools/cli/kernelrl bazel-bin/sandbox/sandbox_main bazel-bin/sandbox/contain/libkernelrl_contain.so \
    bazel-bin/sandbox/measure_baselines bazel-bin/profiler_service/precompute_baselines bazel-bin/sandbox/harness/cuda/libkernelrl_verify_cuda.so "$CARRY/"
  cp bazel-bin/profiler_service/libkprof.so "$CARRY/libkprof_bazel.so"
  . tools/device_libs.sh
  device_stage_libs "$CARRY" "$CARRY/kernelrl" "$CARRY/sandbox_main" "$CARRY/measure_baselines" "$CARRY/precompute_baselines"
  # Only tasks with a reference solution (the scripted policy has nothing else to replay).
  for d in sandbox/solutions/level1/* sandbox/solutions/level2/*; do
    lvl=$(basename "$(dirname "$d")")
    cp "$SHARED/kernelbench/$lvl/$(basename "$d").py" "$CARRY/kernelbench/$lvl/"
  done
  # The chat tokenizer the scripted replies are tokenized with (no model is involved).
  python3 agent/tokenizer/testdata/make_tokenizer_fixtures.py "$CARRY/tok" chat
  du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-/tmp/actor_device_out}
mkdir -p "$OUT/eval"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
PY=$(command -v python3)
CUDA=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$PWD/$CARRY/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# 0. torch.compile of every task, in parallel and untimed, while the recorder
#    builds: the baseline executors of step 2 then load their compiled code.
export TORCHINDUCTOR_CACHE_DIR=/tmp/kr_inductor TORCHINDUCTOR_COMPILE_THREADS=1
( PYTHONPATH=$PWD timeout "${WARM_WALL:-100}" $PY -m profiler_service.harness.precompute \
    --tasks_root "$CARRY/kernelbench" --out "$OUT/compile_warm.jsonl" --workers 6 \
    --warm_only --deadline_s $(( ${WARM_WALL:-100} - 15 )) > "$OUT/compile_warm.log" 2>&1 ) &
WARM=$!

# 1. CUPTI recorder for the candidate process.
KPROF=/tmp/kr_kprof/libkprof.so; mkdir -p /tmp/kr_kprof
CUPTI_H=$(dirname "$(find $CUDA/ $CUDA/extras -name cupti.h 2>/dev/null | head -1)")
CUPTI_SO=$(dirname "$(find $CUDA/ -name 'libcupti.so*' 2>/dev/null | head -1)")
g++ -std=c++17 -O2 -fPIC -shared -I. -I$CUDA/include -I$CUPTI_H profiler_service/cupti/kprof.cc \
  -o $KPROF -L$CUPTI_SO -Wl,-rpath,$CUPTI_SO -L$CUDA/lib64/stubs -lcupti -lcuda > "$OUT/kprof_build.log" 2>&1 ||
  KPROF=$PWD/$CARRY/libkprof_bazel.so
echo "kprof: $KPROF (at $(elapsed) s)"

# The worker's settings (SandboxConfig fields), shared by the baselines (2) and the worker (3).
WORKER="--set=backend=cuda --set=python=$PY --set=harness_dir=$PWD/sandbox/harness \
  --set=contain_lib=$PWD/$CARRY/libkernelrl_contain.so --set=verify_cuda_lib=$PWD/$CARRY/libkernelrl_verify_cuda.so \
  --set=enable_profiling=true --set=kprof_lib=$KPROF --set=profiler_root=$PWD"

# 2. Baselines (eager + torch.compile) of the tasks through the executor path, into the worker's cache.
BASE=/tmp/kr_actor_baselines; rm -rf $BASE; mkdir -p $BASE
wait $WARM
echo "compile warm-up done at $(elapsed) s: $(grep -c 'warm_only: compiled' "$OUT/compile_warm.log" 2>/dev/null) tasks compiled"
timeout -k 10 "${PRECOMPUTE_WALL:-150}" "$CARRY/measure_baselines" $WORKER --set=work_root=/tmp/kr_baseline_work \
  --set=verify.wall_seconds=120 --set=profiler.time_budget_s=0.3 \
  --tasks_root="$CARRY/kernelbench" --out="$OUT/baselines.jsonl" > "$OUT/precompute.log" 2>&1
echo "measure_baselines rc=$? at $(elapsed) s: $(wc -l < "$OUT/baselines.jsonl" 2>/dev/null || echo 0) tasks"
"$CARRY/precompute_baselines" --measurements="$OUT/baselines.jsonl" --set=baseline_cache_dir=$BASE \
  --table="$OUT/baselines.tsv" 2>&1 | tail -2

# 3. A sandbox worker (the same SandboxConfig fields as device_sandbox.sh's sandbox_cli).
rm -f /tmp/kr_actor_ports
"$CARRY/sandbox_main" --set=server.grpc_port=0 --set=server.metrics_port=-1 --set=server.port_file=/tmp/kr_actor_ports \
  $WORKER --set=baseline_dir=$BASE \
  --set=profiler.time_budget_s=${PROFILE_BUDGET:-0.5} --set=work_root=/tmp/kr_actor_work --set=verify.wall_seconds=60 \
  > "$OUT/sandbox_main.log" 2>&1 &
SANDBOX_PID=$!
for _ in $(seq 60); do [ -s /tmp/kr_actor_ports ] && break; sleep 1; done
PORT=$(grep grpc_port /tmp/kr_actor_ports 2>/dev/null | cut -d= -f2)
echo "sandbox worker pid $SANDBOX_PID port ${PORT:-NONE} (at $(elapsed) s)"

# 4. kernelrl eval: 15 tasks, the scripted policy, best-in-trajectory.
timeout "${EVAL_WALL:-420}" "$CARRY/kernelrl" eval \
  --set=task_dirs=$CARRY/kernelbench/level1 --set=task_dirs=$CARRY/kernelbench/level2 \
  --set=actor.tokenizer_path=$CARRY/tok/tokenizer.json \
  --set=actor.policy.kind=scripted --set=actor.policy.scripted_solutions_dir=sandbox/solutions \
  --set=actor.sandbox.target=ipv4:127.0.0.1:${PORT:-1} --set=actor.concurrent_rollouts=${ROLLOUTS:-4} \
  --set=actor.rollout.workspace_root=/var/tmp/kr_actor_ws --set=output_dir=$OUT/eval \
  --set=python=$PY 2> "$OUT/eval_stderr.log" | tee "$OUT/eval_table.md"
echo "eval rc=${PIPESTATUS[0]} at $(elapsed) s"
tail -c 400 "$OUT/eval_stderr.log"
kill $SANDBOX_PID 2>/dev/null
wait $SANDBOX_PID 2>/dev/null
ls -la "$OUT/eval"
# At most 8 files come back from the device: the report and PNGs as they are, the logs as one archive.
mv "$OUT"/eval/* "$OUT"/ 2>/dev/null && rmdir "$OUT/eval"
tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v -e '\.png$' -e '^report\.' -e '^eval_table.md$' -e '^logs.tgz$') 2>/dev/null &&
  (cd "$OUT" && ls | grep -v -e '\.png$' -e '^report\.' -e '^eval_table.md$' -e '^logs.tgz$' | xargs -r rm -f)
