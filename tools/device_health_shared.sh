#!/usr/bin/env bash
# The health probe beside another process on the GPU (docs/SANDBOX.md, step 7):
# the zygote's health job must not count a foreign process's device memory.
#
#   here:   tools/device_health_shared.sh --prepare   # builds and fills .devcarry/health
#   device: tools/device_health_shared.sh             # (run tool, carry .devcarry/health)
set -euo pipefail
CARRY=.devcarry/health
. tools/device_libs.sh
if [ "${1:-}" = "--prepare" ]; then
  bazel build //sandbox/contain:libkernelrl_contain.so
  rm -rf "$CARRY" && mkdir -p "$CARRY"
  cp bazel-bin/sandbox/contain/libkernelrl_contain.so "$CARRY/"
  device_stage_libs "$CARRY" "$CARRY/libkernelrl_contain.so"
  du -sh "$CARRY"
  exit 0
fi
device_lib_path "$CARRY" ldd "$CARRY/libkernelrl_contain.so"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
python3 tools/device_health_shared.py "$(cd "$CARRY" && pwd)/libkernelrl_contain.so"
