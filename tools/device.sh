#!/usr/bin/env bash
# The one interface to the GPU-machine checks (docs/DEVICE.md has each area's
# checks and last measured figures):
#
#   here:    bash tools/device.sh stage AREA...   # build here, fill .devcarry/<dir> (carry it)
#   device:  bash tools/device.sh run [AREA...]   # each area's checks, one status line each
#            bash tools/device.sh list            # areas, what to stage, what to carry
#
# Every area is tools/device_<area>.sh (its header lists its knobs); staging
# shares tools/device_libs.sh (device_stage_libs: the ldd copy of the linked
# .so files). `run` writes each area's log under $OUT/<area>/, packs them into
# $OUT/results.tar.gz (the device tool returns few files) and keeps each log's
# tail in $OUT/<area>.txt. AREA=name:MODE runs the area with MODE=... set
# (e.g. learn:learn, learner_rl:dp).
set -uo pipefail
cd "$(dirname "$0")/.."

# area | stage flag ("-": nothing to stage) | carry | what it checks
AREAS=(
  "sandbox|--prepare|.devcarry/sandbox|compile -> isolated verify -> profile -> judge of the reference solutions and the exploit suite; baselines"
  "confine|-|.devcarry/sandbox (stage sandbox)|confinement: filesystem view, identity, readonly root with CUDA"
  "profiler|-|-|CUPTI vs ncu, ceilings, timing CV, exploit timings, baseline precompute (builds with nvcc/g++ there)"
  "learner|--stage|.devcarry/learner|model parity on CUDA, tokenizer, learner_bench and hf_bench"
  "engine|--stage|.devcarry/engine|policy engine: paged decode kernel vs fp64; one decode step with and without it; decode tokens/s at batch 32/128/256 (0.5B, 7B) vs HF generate; 20-turn agentic replay, prefix cache on/off"
  "learner_rl|--stage|.devcarry/learner_rl|PPO step at 32K/128K, weight sync; MODE=dp: data-parallel on 2 GPUs"
  "actor|--prepare|.devcarry/actor|kernelrl eval with the scripted policy against a CUDA sandbox worker (15 KernelBench tasks)"
  "data|--stage|.devcarry/data|data_synth on one GPU: accepted tasks per minute, rejection reasons"
  "learn|--stage|.devcarry/learn|the task family's templates through the sandbox (MODE=learn: a short learning job, stage --stage-learn)"
  "ops|--stage|.devcarry/ops|kernelrl up with the CUDA sandbox: the quickstart job, health, restarts"
  "codemodel|--stage|.devcarry/ops .devcarry/codemodel|the code model: engineer corpus, bf16 pre-training, the recipe's job, design report, final checkpoint (SEED, ABLATION, PRESETS, LEARNER_DEVICE)"
)

field() { local IFS='|'; read -r -a f <<< "$1"; echo "${f[$2]}"; }
find_area() {
  local a
  for a in "${AREAS[@]}"; do [ "$(field "$a" 0)" = "$1" ] && { echo "$a"; return 0; }; done
  echo "tools/device.sh: unknown area '$1' (tools/device.sh list)" >&2
  return 2
}

cmd=${1:-}
shift || true
case "$cmd" in
  list)
    printf '%-11s %-10s %-36s %s\n' AREA STAGE CARRY CHECKS
    for a in "${AREAS[@]}"; do
      printf '%-11s %-10s %-36s %s\n' "$(field "$a" 0)" "$(field "$a" 1)" "$(field "$a" 2)" "$(field "$a" 3)"
    done
    ;;
  stage)
    [ $# -gt 0 ] || { echo "usage: tools/device.sh stage AREA..." >&2; exit 2; }
    for name in "$@"; do
      a=$(find_area "${name%%:*}") || exit 2
      flag=$(field "$a" 1)
      [ "${name#*:}" = "learn" ] && [ "${name%%:*}" = "learn" ] && flag=--stage-learn
      if [ "$flag" = "-" ]; then echo "$name: nothing to stage ($(field "$a" 2))"; continue; fi
      echo "== stage $name: tools/device_${name%%:*}.sh $flag"
      bash "tools/device_${name%%:*}.sh" "$flag" || { echo "stage $name FAILED"; exit 1; }
    done
    ;;
  run)
    FINAL_OUT="${OUT:-/tmp/kernelrl-device-out}"
    WORK="$(mktemp -d /tmp/kernelrl-device.XXXXXX)"
    mkdir -p "$FINAL_OUT"
    names=("$@")
    [ ${#names[@]} -gt 0 ] || names=(sandbox profiler learner)
    for name in "${names[@]}"; do find_area "${name%%:*}" > /dev/null || exit 2; done
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,temperature.gpu --format=csv,noheader \
      > "$WORK/gpu.txt" 2>&1 || true
    declare -A result
    for name in "${names[@]}"; do
      area=${name%%:*} dir=${name//:/-}
      mkdir -p "$WORK/$dir"
      start=$(date +%s)
      if [ "$name" != "$area" ]; then
        MODE="${name#*:}" OUT="$WORK/$dir" bash "tools/device_${area}.sh" > "$WORK/$dir/log.txt" 2>&1
      else
        OUT="$WORK/$dir" bash "tools/device_${area}.sh" > "$WORK/$dir/log.txt" 2>&1
      fi
      rc=$?
      result[$name]="rc=$rc in $(( $(date +%s) - start )) s (log: $dir/log.txt)"
      tail -n 60 "$WORK/$dir/log.txt" > "$FINAL_OUT/$dir.txt"
    done
    tar -czf "$FINAL_OUT/results.tar.gz" -C "$WORK" .
    cp "$WORK/gpu.txt" "$FINAL_OUT/gpu.txt"
    echo "GPU: $(cat "$WORK/gpu.txt")"
    for name in "${names[@]}"; do echo "$name: ${result[$name]}"; done
    ;;
  *)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    [ "$cmd" = "-h" ] || [ "$cmd" = "--help" ] && exit 0
    exit 2
    ;;
esac
