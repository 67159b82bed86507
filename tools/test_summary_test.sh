#!/usr/bin/env bash
# tools/test_summary.py on a made-up `bazel test` output and test-log tree: a
# random number of clean targets, one GTEST_SKIP case inside a passing gtest
# target, a harness script's SKIPPED line, a unittest skip, failures of every
# kind. Skipping targets must not count as passed.
set -euo pipefail
summary="$1"
root="${TEST_TMPDIR:-$(mktemp -d)}/summary"
rm -rf "$root"; mkdir -p "$root/logs"
log="$root/bazel.log"
clean=$(( (RANDOM % 7) + 1 ))
for i in $(seq "$clean"); do
  echo "//pkg/clean:t$i                                   (cached) PASSED in 0.$i""s" >> "$log"
  mkdir -p "$root/logs/pkg/clean/t$i"
  cat > "$root/logs/pkg/clean/t$i/test.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1"><testsuite name="S" tests="1"><testcase name="Runs" status="run" result="completed" classname="S" /></testsuite></testsuites>
XML
done
# gtest: one case skipped among two.
mkdir -p "$root/logs/gpu/cc_test"
cat > "$root/logs/gpu/cc_test/test.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2"><testsuite name="ToolchainTest" tests="2" skipped="1">
<testcase name="Nvrtc" status="run" result="completed" classname="ToolchainTest" />
<testcase name="DeviceQuery" status="run" result="skipped" classname="ToolchainTest"><skipped message="no GPU on this machine" /></testcase>
</testsuite></testsuites>
XML
echo "[  SKIPPED ] ToolchainTest.DeviceQuery" > "$root/logs/gpu/cc_test/test.log"
echo "//gpu:cc_test                                  PASSED in 0.1s" >> "$log"
# A harness script (sh_test): its marker line in test.log.
mkdir -p "$root/logs/sandbox/harness/cuda/verify_cuda_test"
printf 'checking\nSKIPPED: no CUDA device here\n' > "$root/logs/sandbox/harness/cuda/verify_cuda_test/test.log"
echo "//sandbox/harness/cuda:verify_cuda_test        PASSED in 1.0s" >> "$log"
# unittest -v.
mkdir -p "$root/logs/py/unit"
echo "test_gpu (harness_test.GpuTest.test_gpu) ... skipped 'JUDGE_BIN not set'" > "$root/logs/py/unit/test.log"
echo "//py:unit                                      PASSED in 2.0s" >> "$log"
cat >> "$log" <<'EOF2'
//bad:a                                        FAILED in 0.2s
  /root/.cache/bazel/x/testlogs/bad/a/test.log
//bad:b                                        FAILED TO BUILD
//bad:c                                        TIMEOUT in 60.0s
//bad:d                                        NO STATUS
INFO: Build completed, 4 tests FAILED, 99 total actions
EOF2
out=$(python3 "$summary" "$log" "$root/logs")
echo "$out"
last=$(echo "$out" | tail -1)
want="$clean passed, 4 failed, 3 skipped (//gpu:cc_test, //py:unit, //sandbox/harness/cuda:verify_cuda_test)"
[ "$last" = "$want" ] || { echo "want: $want"; echo "got:  $last"; exit 1; }
echo "$out" | grep -qx "skipped: //gpu:cc_test ToolchainTest.DeviceQuery: no GPU on this machine"
echo "$out" | grep -qx "skipped: //sandbox/harness/cuda:verify_cuda_test: no CUDA device here"
echo "$out" | grep -qx "skipped: //py:unit harness_test.GpuTest.test_gpu: JUDGE_BIN not set"
echo "$out" | grep -qx "failed:  //bad:b (FAILED TO BUILD)"
[ "$(echo "$out" | grep -c '^skipped: //gpu:cc_test')" = 1 ]  # XML and log name one skip once
echo PASS
