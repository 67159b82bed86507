#!/usr/bin/env bash
# The test command (README and CI run exactly this): install what is missing,
# then build everything and run every test. GPU tests skip only on machines
# without a GPU and say why; a target that skipped any case is counted as
# skipped, not passed, and listed with its reasons (tools/test_summary.py).
# Ends with one "N passed, N failed, N skipped (names)" line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
log="$(mktemp /tmp/kernelrl-test.XXXXXX.log)"
set +e
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
testlogs=bazel-testlogs; [ -d "$testlogs" ] || testlogs="$(bazel info bazel-testlogs 2>/dev/null)"
python3 tools/test_summary.py "$log" "$testlogs"
exit "$rc"
