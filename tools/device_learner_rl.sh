#!/usr/bin/env bash
# Learner RL device run in one call; see docs/LEARNER.md "RL".
#   stage (here, after `bazel build //learner/rl:ppo_bench //learner/dist:data_parallel_test
#          //learner/rl:dp_job_test //learner:learner_main`):
#       bash tools/device_learner_rl.sh --stage     -> .devcarry/learner_rl/
#   on one H100 (run tool, default kind):
#       bash tools/device_learner_rl.sh
#     1. PPO step (policy + critic, bf16, activation checkpointing) on the
#        Qwen2-0.5B shape, random init, one 32K-token trajectory and 8 x 4K;
#     2. the same at 128K tokens for a smaller config (12 x 512);
#     3. weight sync: HF checkpoint write + hot swap into the policy server.
#   on two H200s (run tool, kind nvidia-h200-x2, carry .devcarry/learner_rl), <= 150 s:
#       MODE=dp bash tools/device_learner_rl.sh
#     1. //learner/dist:data_parallel_test on the GPUs (KERNELRL_TEST_DP_GPUS=2:
#        fails, not skips, with fewer): the NCCL DP step of a tiny model equals
#        one GPU's;
#     2. //learner/rl:dp_job_test DpJobGpuTest: a FULL_SHARD job (setup, PPO,
#        RFT and value steps, critic values, export, sharded save) over NCCL
#        equals one GPU;
#     3. the learner group: learner_main as two "hosts" of one GPU each on
#        loopback (CUDA_VISIBLE_DEVICES=0 / 1, distributed.hosts=2): both join,
#        host 1 serves health while it follows, SIGTERM to host 0 ends both
#        with exit 0;
#     4. ppo_bench dp: Qwen2-0.5B shape, 8 x 4K tokens, one process per GPU
#        (c10d ProcessGroupNCCL): loss and gradients of the DP step against one
#        GPU on the same batch (relative L2, bf16 tolerance 2e-2), step time,
#        2-GPU / 1-GPU throughput ratio.
#   Results: one JSON line per bench in $OUT/results.jsonl, a table in $OUT/summary.txt.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/learner_rl

if [ "${1:-}" = "--stage" ]; then
  set -e
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib" "$C/libcxx"
  cp "$ROOT/bazel-bin/learner/rl/ppo_bench" "$ROOT/bazel-bin/learner/dist/data_parallel_test" \
     "$ROOT/bazel-bin/learner/rl/dp_job_test" "$ROOT/bazel-bin/learner/learner_main" "$C/bin/"
  . "$ROOT/tools/device_libs.sh"
  device_stage_libs --without-torch --libcxx "$C" "$C/bin/ppo_bench" "$C/bin/data_parallel_test" \
    "$C/bin/dp_job_test" "$C/bin/learner_main"
  du -sh "$C"
  exit 0
fi

OUT=${OUT:-/tmp/learner_rl_out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
R=$OUT/results.jsonl; : > "$R"
S=$OUT/summary.txt; : > "$S"
. "$(dirname "$0")/device_libs.sh"
device_lib_path "$C" "$C/bin/ppo_bench"
echo "== device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)" | tee -a "$S"
run() {  # name, args...
  local name=$1; shift
  echo "== $name: ppo_bench $*" | tee -a "$S"
  timeout "${BENCH_TIMEOUT:-900}" "$C/bin/ppo_bench" "$@" 2>"$OUT/$name.err" | tee -a "$R" "$S"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAILED ($name): $(tail -3 "$OUT/$name.err")" | tee -a "$S"; }
}
# Two learner_main "hosts" of one GPU each on loopback: the group forms, host 1
# serves health while it follows rank 0, and SIGTERM to host 0 ends both.
learner_group_check() {
  local G=$OUT/group port=$((29500 + RANDOM % 1000)) i joined=0
  mkdir -p "$G"
  local common=(--set=distributed.hosts=2 --set=distributed.ranks_per_host=1
                --set=distributed.rendezvous=tcp://127.0.0.1:$port --set=distributed.timeout_seconds=60
                --set=server.grpc_port=0 --set=server.metrics_port=0 --set=server.drain_seconds=0)
  local g0 g1  # The first two of CUDA_VISIBLE_DEVICES when the caller set it (other GPUs busy).
  IFS=, read -r g0 g1 _ <<< "${CUDA_VISIBLE_DEVICES:-0,1}"
  echo "== learner group: 2 hosts x 1 GPU (GPUs $g0, $g1), rendezvous 127.0.0.1:$port" | tee -a "$S"
  CUDA_VISIBLE_DEVICES=$g1 "$C/bin/learner_main" "${common[@]}" --set=distributed.host_rank=1 \
    --set=state_dir="$G/host1" >"$G/host1.log" 2>&1 &
  local h1=$!
  CUDA_VISIBLE_DEVICES=$g0 "$C/bin/learner_main" "${common[@]}" --set=distributed.host_rank=0 \
    --set=state_dir="$G/host0" >"$G/host0.log" 2>&1 &
  local h0=$!
  for i in $(seq 120); do
    if grep -q "joined" "$G/host1.log" && grep -q "data-parallel rank 0 of 2" "$G/host0.log"; then joined=1; break; fi
    kill -0 "$h0" 2>/dev/null || break  # Host 0 gave up.
    sleep 0.5
  done
  kill -TERM "$h0" 2>/dev/null
  wait "$h0"; local rc0=$?
  for i in $(seq 60); do kill -0 "$h1" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$h1" 2>/dev/null
  wait "$h1"; local rc1=$?
  local result=FAIL
  [ "$joined" = 1 ] && [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && result=PASS
  echo "learner group $result: joined=$joined host0 exit $rc0, host1 exit $rc1" | tee -a "$S"
  [ "$result" = PASS ] || tail -n 5 "$G/host0.log" "$G/host1.log" | tee -a "$S"
}
if [ "${MODE:-one}" = "dp" ]; then
  # NVLink multicast stays off (shared hosts; .library/device/KINDS.md); ranks inherit this environment.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  GPUS=${GPUS:-2}
  echo "== dp_test: data_parallel_test, KERNELRL_TEST_DP_GPUS=$GPUS" | tee -a "$S"
  KERNELRL_TEST_DP_GPUS=$GPUS timeout 45 "$C/bin/data_parallel_test" >"$OUT/dp_test.log" 2>&1
  rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|rank [0-9]" "$OUT/dp_test.log" | head -20 | tee -a "$S"
  echo "dp_test exit $rc" | tee -a "$S"
  echo "== dp_job_test: DpJobGpuTest, KERNELRL_TEST_DP_GPUS=$GPUS" | tee -a "$S"
  KERNELRL_TEST_DP_GPUS=$GPUS timeout 60 "$C/bin/dp_job_test" --gtest_filter='DpJobGpuTest.*' \
    >"$OUT/dp_job_test.log" 2>&1
  rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|rank [0-9]|differs" "$OUT/dp_job_test.log" | head -20 | tee -a "$S"
  echo "dp_job_test exit $rc" | tee -a "$S"
  learner_group_check
  BENCH_TIMEOUT=100 run ppo_dp_0.5b_8x4k dp 32768 qwen2-0.5b 8 "$GPUS"
  exit 0
fi
run ppo_32k_1x32k   step 32768 qwen2-0.5b 1
run ppo_32k_8x4k    step 32768 qwen2-0.5b 8
run ppo_128k_small  step 131072 small 1
run weight_sync     sync "$OUT/ckpt"
rm -rf "$OUT/ckpt"
