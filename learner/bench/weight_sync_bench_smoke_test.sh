#!/usr/bin/env bash
# The GPU benchmark's path (process spawning, two groups, sharding, send,
# receive, the JSON lines) on the CPU: 2 learner ranks, 1 replica, 2 rounds.
set -euo pipefail
out=$("$TEST_SRCDIR/kernelrl/learner/bench/weight_sync_bench" smoke)
echo "$out"
echo "$out" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin.read().splitlines() if l.startswith("{")]
assert [r["round"] for r in rows] == [1, 2], rows
for r in rows:
    assert r["bench"] == "weight_sync" and r["learner_gpus"] == 2 and r["replicas"] == 1, r
    assert r["bytes"] > 0 and r["send_s"] > 0 and r["replica_max_s"] > 0, r
'
