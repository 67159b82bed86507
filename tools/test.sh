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
# One run at a time in a checkout: a second queues behind the first's bazel server and reads
# its half-written test logs. flock holds the lock for this script's life only: -o closes it
# in the script, else the bazel server that the run starts and that outlives it keeps it.
if [ -z "${KERNELRL_TEST_LOCK_HELD:-}" ]; then
  lock="$(git rev-parse --absolute-git-dir 2>/dev/null || echo "/tmp/kernelrl-test-$(pwd | sha256sum | cut -c1-12)")"
  [ -d "$lock" ] && lock="$lock/kernelrl-test.lock"
  set +e
  KERNELRL_TEST_LOCK_HELD=1 flock -n -o -E 75 "$lock" bash tools/test.sh "$@"
  rc=$?
  [ "$rc" -eq 75 ] && echo "tools/test.sh: another test run holds $lock in this checkout; let it finish, or stop it (then bazel shutdown)" >&2
  exit "$rc"
fi
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
