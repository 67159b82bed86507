#!/usr/bin/env bash
# The test command (README and CI run exactly this): install what is missing,
# then build everything and run every test. GPU tests skip only on machines
# without a GPU and say why; a target that skipped any case is counted as
# skipped, not passed, and listed with its reasons (tools/test_summary.py).
# Then two checks: no confinement test skipped on a host that has what it
# needs (tools/confinement_skips.py, which lists the ones that did skip and
# why), and clang's thread-safety analysis over the lock-annotated code
# (tools/thread_safety.sh). The summary line comes before their results.
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
# A confinement test that skipped on a host having what it needs is a failure.
cs_rc=0
python3 tools/confinement_skips.py "$testlogs" || cs_rc=$?
# gcc ignores the Abseil lock annotations; clang's analysis checks them.
ts_rc=0
bash tools/thread_safety.sh || ts_rc=$?
[ "$rc" -ne 0 ] && exit "$rc"
[ "$cs_rc" -ne 0 ] && exit "$cs_rc"
exit "$ts_rc"
