#!/usr/bin/env bash
# Runs the Python harness tests (CPU backend) with the C++ judge they hand
# measurements to. Needs python3 with torch (CPU).
set -euo pipefail
JUDGE_BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
export JUDGE_BIN
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="$PWD" PYTHONDONTWRITEBYTECODE=1
exec python3 -m unittest -v profiler_service.harness.harness_test
