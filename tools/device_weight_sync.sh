#!/usr/bin/env bash
# Weight sync without disk on four GPUs: a Qwen2.5-7B-shaped policy (random
# init) sharded over 4 learner ranks, sent to 3 engine replicas (GPUs 1..3)
# over ProcessGroupNCCL (learner/bench/weight_sync_bench.cc; goal <= 2 s per
# version). Then 1 replica, to see the broadcast's cost per replica. Then
# policy_replica_main as its own process on GPU 1, taking versions from this
# side over NCCL (tests/remote_replicas_test.cc, KERNELRL_TEST_REPLICA_GPUS=2).
# On two GPUs the bench runs 2 learner ranks -> 1 replica instead.
#   stage (here, after `bazel build //learner/bench:weight_sync_bench
#   //tests:remote_replicas_test //learner:policy_replica_main`):
#       bash tools/device_weight_sync.sh --stage      -> .devcarry/weight_sync/
#   on four GPUs (run tool, kind nvidia-h100-x4 or nvidia-h200-x4, carry
#   .devcarry/weight_sync):
#       bash tools/device_weight_sync.sh                (~4 min: model setup dominates)
#   Knobs: BENCH=0 runs only the replica test; NCCL_DEBUG (default WARN).
#   Results: one JSON line per round in $OUT/results.jsonl, a table in $OUT/summary.txt.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/weight_sync
. "$(dirname "$0")/device_libs.sh"

if [ "${1:-}" = "--stage" ]; then
  set -e
  rm -rf "$C" && mkdir -p "$C/bin"
  cp "$ROOT/bazel-bin/learner/bench/weight_sync_bench" "$ROOT/bazel-bin/tests/remote_replicas_test" "$C/bin/"
  mkdir -p "$C/bin/learner" && cp "$ROOT/bazel-bin/learner/policy_replica_main" "$C/bin/learner/"
  device_stage_libs --without-torch --libcxx "$C" "$C/bin/weight_sync_bench" "$C/bin/remote_replicas_test" \
    "$C/bin/learner/policy_replica_main"
  du -sh "$C"
  exit 0
fi

OUT=${OUT:-/tmp/weight_sync_out}; mkdir -p "$OUT"
R=$OUT/results.jsonl; : > "$R"
S=$OUT/summary.txt; : > "$S"
device_lib_path "$C" "$C/bin/weight_sync_bench"
# NVLink multicast stays off (shared hosts; .library/device/KINDS.md); ranks inherit this environment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "== device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)" | tee -a "$S"
run() {  # name, timeout, args...
  local name=$1 limit=$2; shift 2
  echo "== $name: weight_sync_bench $*" | tee -a "$S"
  timeout "$limit" "$C/bin/weight_sync_bench" "$@" 2>"$OUT/$name.err" | tee -a "$R" "$S"
  [ "${PIPESTATUS[0]}" = 0 ] || echo "FAILED or stopped ($name): $(tail -3 "$OUT/$name.err")" | tee -a "$S"
}
GPUS=$(nvidia-smi -L | wc -l)
if [ "${BENCH:-1}" = 0 ]; then
  echo "== bench skipped (BENCH=0)" | tee -a "$S"
elif [ "$GPUS" -ge 4 ]; then
  run 7b_4x3 300 run qwen2.5-7b 4 3 4
  run 7b_4x1 240 run qwen2.5-7b 4 1 3
else  # Two GPUs: 2 learner ranks to the one replica on GPU 1.
  run 7b_2x1 300 run qwen2.5-7b 2 1 4
fi
# The replica binary in its own process (the test finds it at learner/policy_replica_main).
echo "== policy_replica_main over NCCL (tests/remote_replicas_test)" | tee -a "$S"
( cd "$C/bin" && NCCL_DEBUG=${NCCL_DEBUG:-WARN} KERNELRL_TEST_REPLICA_GPUS=2 timeout 300 ./remote_replicas_test > "$OUT/remote_replicas.log" 2>&1 )
echo "remote_replicas_test rc=$?: $(grep -E '^\[ +(OK|FAILED|SKIPPED) +\]' "$OUT/remote_replicas.log" | tr '\n' ' ')" | tee -a "$S"
python3 - "$R" <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for n in sorted({r["replicas"] for r in rows}):
    rs = [r for r in rows if r["replicas"] == n and r["round"] > 1]  # Round 1 sets NCCL up.
    if rs:
        best = min(max(r["send_s"], r["replica_max_s"]) for r in rs)
        print(f"7B ({rs[0]['gib']:.1f} GiB bf16) from {rs[0].get('learner_gpus', '?')} learner ranks to {n} replica(s): best {best:.2f} s "
              f"({'meets' if best <= 2 else 'misses'} the 2 s goal)")
PY
