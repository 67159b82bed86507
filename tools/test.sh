#!/usr/bin/env bash
# The test command (README and CI run exactly this): install what is missing,
# then build everything and run every test. GPU tests skip on machines without
# a GPU and print why. Ends with one "N passed, N failed" line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
log="$(mktemp /tmp/kernelrl-test.XXXXXX.log)"
set +e
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log" || true)
echo "${passed} passed, ${failed} failed"
exit "$rc"
