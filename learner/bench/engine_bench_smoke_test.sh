#!/usr/bin/env bash
# The GPU benchmark's code on the CPU (tiny model, fp32): decode at two batch
# sizes, one decode step with and without our kernels (on the CPU both run
# the same ATen path), its per-kernel profile line, and the agentic replay
# with prefix caching on, also a short one of the code model's shape: each
# prints the JSON lines tools/device_engine.sh reads.
set -euo pipefail
bin="$TEST_SRCDIR/kernelrl/learner/bench/engine_bench"
out=$("$bin" decode tiny 2,4 8 8 eager; "$bin" step tiny 2:40,3:17 --profile; "$bin" agentic tiny 2 3 on; "$bin" agentic codemodel-cpu 2 2 on 40 16 8)
echo "$out"
echo "$out" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin.read().splitlines() if l.startswith("{")]
decode = [r for r in rows if r.get("bench") == "decode"]
assert [r["batch"] for r in decode] == [2, 4], decode
for r in decode:
    assert r["tokens"] == 8 * r["batch"] and r["runs"] == 5, r
    assert r["tokens_per_s_min"] <= r["tokens_per_s"] <= r["tokens_per_s_max"], r
step = [r for r in rows if r.get("bench") == "step"]
assert [(r["batch"], r["ctx"]) for r in step] == [(2, 40), (3, 17)], step
assert all(r["kernel_ms"] > 0 and r["gather_ms"] > 0 for r in step), step
assert len([r for r in rows if r.get("bench") == "step_profile"]) == 2, rows
agentic = [r for r in rows if r.get("bench") == "agentic"]
assert len(agentic) == 2 and agentic[0]["generated"] == 2 * 3 * 64, agentic
assert agentic[1]["shape"] == "codemodel-cpu" and agentic[1]["generated"] == 2 * 2 * 16, agentic
assert agentic[1]["tokens_per_s_per_rollout"] > 0, agentic
assert 0 < agentic[0]["prefill_tokens"] < agentic[0]["prompt_tokens"], agentic
'
