#!/usr/bin/env bash
# Data synthesis on one GPU in one call; see docs/DATA.md.
#   here:   bazel build //data:data_synth && tools/device_data.sh --stage
#           (fills .devcarry/data: data_synth, the Debian .so files it needs, KernelBench level1-3)
#   device: run tool, carry [".devcarry/data"], command: bash tools/device_data.sh
#   dry run here (CPU, small): DRY_RUN=1 TARGET=20 bash tools/device_data.sh
# One data_synth run: crawl, compose, filters on the GPU in WORKERS processes,
# eager timing through the profiler's protocol serialised by its GPU lock,
# decontamination against KernelBench; stops at TARGET accepted tasks or
# DEADLINE_S (in-flight candidates finish after it). Each candidate runs within
# a memory grant (budget / WORKERS; x4, then the whole budget after an
# out-of-memory error): the budget is the GPU's memory less PER_WORKER_MIB per
# worker (CUDA context, the timing backend's flush and anchor buffers) and
# 3 GiB; tasks are sized to 80% of a grant (sampler.max_task_bytes).
# Under $OUT (7 files): summary.txt, report.md (Table-3 layout, acceptance per
# filter, throughput, where the time goes), similarity.png, dataset.jsonl,
# run.log, journal.jsonl.gz (every candidate's verdict and facts, sources
# left out), worker0.log (tail).
# Knobs: TARGET (2000), WORKERS (14), DEADLINE_S (450), COMPILE_BACKEND
# (aot_eager: dynamo + AOT capture; inductor compiles every candidate fully,
# ~3-5x slower per candidate), PER_WORKER_MIB (1536), KPROF=1 (CUPTI timing;
# default CUDA events), RESUME=1 (keep STATE_DIR: a second call on the same,
# still warm machine continues the journal instead of starting over).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/data

if [ "${1:-}" = "--stage" ]; then  # Run HERE, after `bazel build //data:data_synth`.
  set -e
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib" "$C/libcxx" "$C/kernelbench"
  cp "$ROOT/bazel-bin/data/data_synth" "$C/bin/"
  . "$ROOT/tools/device_libs.sh"
  device_stage_libs --libcxx "$C" "$C/bin/data_synth"
  SHARED=${KERNELRL_SHARED_DIR:-$(cd "$ROOT/.." && pwd)/shared}
  for l in level1 level2 level3; do
    [ -d "$SHARED/kernelbench/$l" ] && cp -r "$SHARED/kernelbench/$l" "$C/kernelbench/"
  done
  du -sh "$C"
  exit 0
fi

T0=$(date +%s)
OUT=${OUT:-/tmp/data_out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
S=$OUT/summary.txt; : > "$S"
say() { echo "$*" | tee -a "$S"; }
BIN=$C/bin/data_synth
KB=$C/kernelbench
if [ -n "${DRY_RUN:-}" ]; then  # Here: the Bazel binary, the shared KernelBench, the CPU.
  BIN=$ROOT/bazel-bin/data/data_synth
  KB=${KERNELRL_SHARED_DIR:-$(cd "$ROOT/.." && pwd)/shared}/kernelbench
else
  export LD_LIBRARY_PATH="$C/lib:${LD_LIBRARY_PATH:-}"
  if "$BIN" --help 2>&1 | grep -q "not found"; then
    export LD_LIBRARY_PATH="$C/libcxx:$LD_LIBRARY_PATH"  # Device libstdc++ older than ours.
  fi
  say "== device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
fi
say "== torch $($PY -c 'import torch, sys; print(torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"

STATE=${STATE_DIR:-/tmp/data_synth_run}
[ -n "${RESUME:-}" ] || rm -rf "$STATE"
ARGS=(--config="$ROOT/data/data_config.textproto" --set=out_dir="$STATE" --set=harness_root="$ROOT"
      --set=python="$PY" --set=kernelbench_root="$KB" --set=progress_every_s=15 --set=worker_threads=1
      --set=filters.compile_backend="${COMPILE_BACKEND:-aot_eager}")
if [ -n "${DRY_RUN:-}" ]; then
  ARGS+=(--set=target_accepted="${TARGET:-20}" --set=workers="${WORKERS:-2}" --set=deadline_s="${DEADLINE_S:-900}"
         --set=target.device=cpu --set=sampler.min_target_ms=2 --set=sampler.max_target_ms=20)
else
  W=${WORKERS:-14}
  TOTAL_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -dc 0-9)
  [ -n "$TOTAL_MIB" ] || TOTAL_MIB=$($PY -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory >> 20)')
  BUDGET_MIB=$(( TOTAL_MIB - W * ${PER_WORKER_MIB:-1536} - 3072 ))
  TASK_BYTES=$(( BUDGET_MIB / W * 8 / 10 * 1048576 ))
  say "== memory: ${TOTAL_MIB} MiB GPU, budget ${BUDGET_MIB} MiB = $W grants of $(( BUDGET_MIB / W )) MiB; tasks sized to $(( TASK_BYTES >> 20 )) MiB"
  # H100: ~2.5 TB/s reached by eager elementwise kernels, fp32 GEMM/conv (TF32 off for matmul) ~40 TFLOP/s.
  ARGS+=(--set=target_accepted="${TARGET:-2000}" --set=workers="$W" --set=deadline_s="${DEADLINE_S:-450}"
         --set=target.device=cuda --set=target.bandwidth_gbps=2500 --set=target.gflops=40000 --set=target.launch_us=8
         --set=target.memory_budget_bytes=$(( BUDGET_MIB * 1048576 ))
         --set=sampler.min_target_ms=2 --set=sampler.max_target_ms=10 --set=sampler.max_tensor_bytes=1073741824
         --set=sampler.max_task_bytes=$TASK_BYTES --set=request_timeout_s=120)
  if [ -n "${KPROF:-}" ]; then
    CUDA=${CUDA_HOME:-/usr/local/cuda}
    CUPTI_H=$(dirname "$(find $CUDA/ $CUDA/extras -name cupti.h 2>/dev/null | head -1)")
    CUPTI_SO=$(dirname "$(find $CUDA/ -name 'libcupti.so*' 2>/dev/null | head -1)")
    g++ -std=c++17 -O2 -fPIC -shared -I"$ROOT" -I$CUDA/include -I"$CUPTI_H" "$ROOT/profiler_service/cupti/kprof.cc" \
      -o /tmp/libkprof.so -L"$CUPTI_SO" -Wl,-rpath,"$CUPTI_SO" -L$CUDA/lib64/stubs -lcupti -lcuda &&
      export CUDA_INJECTION64_PATH=/tmp/libkprof.so || say "kprof build failed: CUDA-event timing"
  fi
fi
say "== data_synth ${ARGS[*]}"
"$BIN" "${ARGS[@]}" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
for f in dataset.jsonl report.md similarity.png; do cp "$STATE/$f" "$OUT/" 2>/dev/null; done
tail -c 20000 "$STATE/state/worker.log.0" > "$OUT/worker0.log" 2>/dev/null
# Every candidate's fate without the accepted sources (those are in dataset.jsonl).
$PY -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line); r.pop("source", None); print(json.dumps(r, separators=(",", ":")))' \
  < "$STATE/state/journal.jsonl" 2>/dev/null | gzip -9 > "$OUT/journal.jsonl.gz"
say "== data_synth rc=$rc after $(( $(date +%s) - T0 )) s; $(wc -l < "$OUT/dataset.jsonl" 2>/dev/null || echo 0) tasks in $OUT/dataset.jsonl"
grep -E "candidates/min|^\| (1|2|3|4|5) torch|^\| transformers|^\| total|^\| [a-z_]+ \| [0-9]+ \| [0-9]+ \| [0-9.]+%|^\| accepted|^\| (waiting|probe|timing|compose)|^Memory|^Worker capacity|^Eager runtime|^Highest" \
  "$OUT/report.md" 2>/dev/null | tee -a "$S"
exit $rc
