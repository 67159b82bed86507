#!/usr/bin/env bash
# `kernelrl up` on the GPU machine: the embedded cluster with the
# sandbox's CUDA backend runs the quickstart job (tiny random model on the GPU,
# KernelBench level-1 tasks with CUDA reference solutions replayed by the
# scripted policy, 2 PPO steps), then the ledger audit. See docs/OPERATIONS.md.
#
#   here:   tools/device_ops.sh --stage     # builds, fills .devcarry/ops (binaries,
#                                           # runfiles, Debian .so files, the tasks' sources)
#   device: tools/device_ops.sh             # run tool, carry [".devcarry/ops"]
# BACKEND=cpu runs the same from the carry on a CPU machine (a dry run of the staging).
# Results under $OUT: up.txt (everything kernelrl up printed), audit.txt, logs.tar.gz.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/ops
BINARIES=(tools/cli/kernelrl learner/learner_main sandbox/sandbox_main sandbox/measure_baselines actor/actor_main)

if [ "${1:-}" = "--stage" ]; then  # Run HERE.
  set -e
  cd "$ROOT"
  bazel build //tools/cli:kernelrl //learner:learner_main //sandbox:sandbox_main \
    //sandbox:measure_baselines //actor:actor_main
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib" "$C/libcxx" "$C/shared/kernelbench/level1"
  for b in "${BINARIES[@]}"; do
    mkdir -p "$C/bin/$(dirname "$b")"
    cp -L "bazel-bin/$b" "$C/bin/$b"
    # Without the symbol tables (30 -> 16 MB, under the 64 MiB carry with a learning run's state); a
    # device crash trace's addresses resolve with addr2line against the same build in bazel-bin here.
    strip -s "$C/bin/$b"
    if [ -d "bazel-bin/$b.runfiles" ]; then  # The harnesses; without the binary's own copy (carry cap).
      cp -rL "bazel-bin/$b.runfiles" "$C/bin/$b.runfiles" && rm -f "$C/bin/$b.runfiles/kernelrl/$b"
    fi
  done
  . "$ROOT/tools/device_libs.sh"
  device_stage_libs --without-torch --libcxx "$C" "${BINARIES[@]/#/bazel-bin/}"
  SHARED=${KERNELRL_SHARED_DIR:-$(cd "$ROOT/.." && pwd)/shared}
  for d in sandbox/solutions/level1/*/; do
    cp "$SHARED/kernelbench/level1/$(basename "$d").py" "$C/shared/kernelbench/level1/"
  done
  du -sh "$C"
  exit 0
fi

cd "$ROOT"
OUT=${OUT:-/tmp/ops_device_out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
[ -x "$C/bin/tools/cli/kernelrl" ] || { echo "no $C: run tools/device_ops.sh --stage here and carry .devcarry/ops"; exit 2; }
. "$(dirname "$0")/device_libs.sh"
device_lib_path "$C" "$C/bin/learner/learner_main" --print_config
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN=/tmp/kernelrl-ops-run
rm -rf "$RUN"
timeout "${WALL:-540}" "$C/bin/tools/cli/kernelrl" up --bin_dir="$C/bin" --repo_dir="$ROOT" \
  --shared_dir="$C/shared" --run_dir="$RUN" --backend="${BACKEND:-cuda}" \
  --job_timeout_s="${JOB_WALL:-450}" --stall_timeout_s=240 2>&1 | tee "$OUT/up.txt"
rc=${PIPESTATUS[0]}
job_dir=$(ls -d "$RUN"/learner-state/jobs/*/ 2>/dev/null | head -1)
if [ -n "$job_dir" ]; then
  buffered=$(sed -n 's/^\[up *[0-9.]*s\]   buffer_depth *//p' "$OUT/up.txt" | tail -1)
  $PY tests/ops_ledger_audit.py "$job_dir/ledger.jsonl" --buffered="${buffered:-0}" \
    --trajectories_dir="$job_dir/trajectories" 2>&1 | tee "$OUT/audit.txt"
fi
tar -czf "$OUT/logs.tar.gz" -C "$RUN" --exclude='quickstart/model' --exclude='learner-state/jobs/*/checkpoints' \
  --exclude='*-workspaces' . 2>/dev/null
echo "kernelrl up exit code: $rc"
exit "$rc"
