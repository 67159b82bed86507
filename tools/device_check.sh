#!/usr/bin/env bash
# All GPU-machine checks in one call: runs each area's tools/device_<area>.sh
# (sandbox, profiler, learner) in turn, each writing under $OUT/<area>/, and
# prints one status line per area last. Usage on the device tool:
#   bash tools/device_check.sh [area ...]      (default: all areas present)
# Areas read what they need from .devcarry/<area>/ (carried, git-ignored).
# The device tool returns at most 8 files, so every area's files are packed
# into $OUT/results.tar.gz, with $OUT/<area>.txt holding each log's tail.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL_OUT="${OUT:-/tmp/kernelrl-device-out}"
OUT="$(mktemp -d /tmp/kernelrl-device.XXXXXX)"
mkdir -p "$FINAL_OUT"
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
tar -czf "$FINAL_OUT/results.tar.gz" -C "$OUT" .
cp "$OUT/gpu.txt" "$FINAL_OUT/gpu.txt"
for area in "${areas[@]}"; do
  [ -f "$OUT/$area/log.txt" ] && tail -n 60 "$OUT/$area/log.txt" > "$FINAL_OUT/$area.txt"
done
echo "GPU: $(cat "$OUT/gpu.txt")"
for area in "${areas[@]}"; do echo "$area: ${result[$area]}"; done
