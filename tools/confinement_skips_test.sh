#!/usr/bin/env bash
# confinement_skips.py on made-up test logs: a net-namespace skip fails on a
# host that has net namespaces and passes (listed) on one that has not; a
# cgroup skip on a host without cgroup v2 passes.
set -euo pipefail
script="$1"
logs="${TEST_TMPDIR:-$(mktemp -d)}/testlogs"
mkdir -p "$logs/sandbox/contain/contain_test"
cat > "$logs/sandbox/contain/contain_test/test.xml" <<'XML'
<testsuites><testsuite name="ContainTest">
<testcase name="NetNamespaceHidesTheHostNetwork" classname="ContainTest" result="skipped"><skipped message="contain_test.cc:85&#10;host forbids net namespaces"/></testcase>
<testcase name="MemoryCgroupProbeSaysWhyNot" classname="ContainTest" result="skipped"><skipped message="contain_test.cc:305&#10;no cgroup v2 memory controller here"/></testcase>
</testsuite></testsuites>
XML
full="user_ns=yes,mount_ns=yes,pid_ns_proc=yes,net_ns=yes,seccomp=yes,cgroup_v2_memory=no"
if out=$(python3 "$script" "$logs" --host="$full"); then
  echo "FAIL: a net-namespace skip passed on a host with net namespaces"; echo "$out"; exit 1
fi
grep -q "FAIL //sandbox/contain:contain_test ContainTest.NetNamespaceHidesTheHostNetwork" <<< "$out"
no_net="user_ns=yes,mount_ns=yes,pid_ns_proc=yes,net_ns=no,seccomp=yes,cgroup_v2_memory=no"
out=$(python3 "$script" "$logs" --host="$no_net")
grep -q "host lacks net_ns" <<< "$out"
grep -q "host lacks cgroup_v2_memory" <<< "$out"
echo "confinement_skips: ok"
