#!/usr/bin/env bash
# Runs one of the harness's Python test scripts (argument: its path).
# A script that skips prints a line starting "SKIPPED:" with the reason
# (tools/test.sh counts them). Skipping is for machines without a GPU only:
# where a GPU is present (/dev/nvidiaN), a skip means a library or kernel did
# not load, and the test fails.
set -euo pipefail
log="${TEST_TMPDIR:-/tmp}/python_test.$$.log"
set +e
python3 "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
gpu=$(ls /dev 2>/dev/null | grep -E '^nvidia[0-9]+$' | head -1 || true)
if [ "$rc" = 0 ] && [ -n "$gpu" ] && grep -q '^SKIPPED' "$log"; then
  echo "FAILED: the test skipped on a machine with a GPU (/dev/$gpu); GPU tests skip only where there is none"
  exit 1
fi
exit "$rc"
