#!/usr/bin/env bash
# All GPU-machine checks in one call: runs each area's tools/device_<area>.sh
# (sandbox, profiler, learner) in turn, each writing under $OUT/<area>/, and
# prints one status line per area last. Usage on the device tool:
#   bash tools/device_check.sh [area ...]      (default: all areas present)
# Areas read what they need from .devcarry/<area>/ (carried, git-ignored).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kernelrl-device-out}"
mkdir -p "$OUT"
areas=("$@")
[ ${#areas[@]} -gt 0 ] || areas=(sandbox profiler learner)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,temperature.gpu --format=csv,noheader \
  > "$OUT/gpu.txt" 2>&1 || true
declare -A result
for area in "${areas[@]}"; do
  script="tools/device_${area}.sh"
  if [ ! -f "$script" ]; then result[$area]="no script"; continue; fi
  mkdir -p "$OUT/$area"
  start=$(date +%s)
  OUT="$OUT/$area" bash "$script" > "$OUT/$area/log.txt" 2>&1
  rc=$?
  result[$area]="rc=$rc in $(( $(date +%s) - start )) s (log: $area/log.txt)"
done
echo "GPU: $(cat "$OUT/gpu.txt")"
for area in "${areas[@]}"; do echo "$area: ${result[$area]}"; done
