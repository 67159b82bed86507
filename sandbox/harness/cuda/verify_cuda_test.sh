#!/usr/bin/env bash
# Runs sandbox/harness/verify_cuda_test.py (GPU; prints why it skips elsewhere).
set -euo pipefail
exec python3 sandbox/harness/verify_cuda_test.py "$1"
