#!/usr/bin/env bash
# `kernelrl eval` by flags alone (CPU): a tiny random checkpoint made here, served
# by the learner's built-in policy server with its OpenAI-compatible endpoint;
# eval evaluates two KernelBench level-1 tasks (read from the shared KernelBench
# checkout: KERNELRL_SHARED_DIR, else ../shared beside this checkout) against
# that endpoint, with a CPU sandbox it starts itself, and writes the report.
# Oracles: report.json holds exactly the asked tasks, each with the asked
# rollouts, every rollout's final verdict, and the policy's turns (so the
# endpoint answered); Table 1 lists level1 and overall over 2 tasks; the PNGs
# are PNGs; transcripts/ holds one text per rollout with its turns and verdict, trajectories/ its Trajectory; `kernelrl report DIR` re-renders the same report.md and the plots;
# a bad flag, value or config file is one line on stderr and exit code 2.
set -euo pipefail
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
REPO=$(dirname "$(dirname "$(dirname "$(realpath tools/cli/up_quickstart.py)")")")
SHARED="${KERNELRL_SHARED_DIR:-$REPO/../shared}"
if [ ! -d "$SHARED/kernelbench/level1" ]; then
  echo "SKIP: no KernelBench level 1 at $SHARED/kernelbench/level1 (set KERNELRL_SHARED_DIR)"
  exit 0
fi
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log "$tmp"/run/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done; exit 1; }

python3 tools/cli/up_quickstart.py "$tmp/qs" "$PWD" > "$tmp/assets.log" 2>&1 || fail "up_quickstart.py"
learner/learner_main --set=server.grpc_port=0 --set=server.metrics_port=0 --set=state_dir="$tmp/state" \
  --set=policy.enabled=true --set=policy.model_path="$tmp/qs/model" --set=policy.device=cpu --set=policy.dtype=float32 \
  --set=policy.openai_enabled=true --set=policy.openai_port=0 --set=policy.openai_port_file="$tmp/openai.port" \
  > "$tmp/learner.log" 2>&1 &
learner=$!
trap 'kill $learner 2>/dev/null || true' EXIT
for _ in $(seq 1 1200); do [ -s "$tmp/openai.port" ] && break; kill -0 $learner || fail "learner exited"; sleep 0.1; done
port=$(sed -n 's/^openai_port=//p' "$tmp/openai.port")
[ -n "$port" ] || fail "no OpenAI port"

tools/cli/kernelrl eval --policy=openai --endpoint="http://127.0.0.1:$port" --model=model \
  --tokenizer="$tmp/qs/model/tokenizer.json" --tasks=kernelbench:level1:12,7 --kernelbench_dir="$SHARED/kernelbench" \
  --rollouts=2 --max_turns=2 --max_new_tokens=32 --sandbox_backend=cpu --bin_dir="$PWD" --run_dir="$tmp/run" \
  --out="$tmp/eval" > "$tmp/eval.log" 2>&1 || fail "kernelrl eval exited $?"
cat "$tmp/eval.log"

python3 - "$tmp/eval" <<'PYEOF' || fail "report checks"
import json, sys
out = sys.argv[1]
r = json.load(open(out + "/report.json"))
ids = sorted(t["task_id"] for t in r["tasks"])
assert ids == ["level1/12_Matmul_with_diagonal_matrices_", "level1/7_Matmul_with_small_K_dimension_"], ids
for t in r["tasks"]:
    assert t["rollouts"] == 2 and len(t["rollout_finals"]) == 2, t
    assert t["turns"] >= 1, t  # The endpoint answered.
    assert t["outcome"] != "OUTCOME_UNSPECIFIED", t
levels = {l["level"]: l for l in r["levels"]}
assert set(levels) == {"level1", "overall"} and levels["overall"]["tasks"] == 2, levels
md = open(out + "/report.md").read()
assert md.startswith("| Subset | Tasks | Pass | Faster vs Eager | Faster vs Compile"), md[:80]
for png in ("speedups.png", "outcomes.png"):
    assert open(out + "/" + png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", png
import os
names = sorted(os.listdir(out + "/transcripts"))
want = sorted("%s-%d.txt" % (i.replace("/", "-"), k) for i in ids for k in range(2))
assert names == want, (names, want)
for n in names:
    text = open(out + "/transcripts/" + n).read()
    assert text.startswith("task level1/"), text[:80]
    # The tiny model's prompt overflows its context, so a rollout may stop before any reply.
    assert "\nfinal verdict: " in text and "\n=== SYSTEM\n" in text and "\n=== USER\n" in text, text[:400]
    assert "(KernelBench level 1)." in text.split("\n=== USER\n")[1], text[:400]
# Beside each transcript its Trajectory (protobuf: the task id and trajectory id as raw strings).
pbs = sorted(os.listdir(out + "/trajectories"))
assert pbs == [n[:-len(".txt")] + ".pb" for n in names], (pbs, names)
for i in ids:
    for k in range(2):
        data = open("%s/trajectories/%s-%d.pb" % (out, i.replace("/", "-"), k), "rb").read()
        assert i.encode() in data and ("eval/%s/%d" % (i, k)).encode() in data, (i, k, data[:200])
print("ok   report.json: 2 tasks x 2 rollouts, Table 1, PNGs; a transcript and a trajectory per rollout")
PYEOF

cp "$tmp/eval/report.md" "$tmp/report.md.eval"
rm "$tmp/eval/report.md" "$tmp/eval/speedups.png" "$tmp/eval/outcomes.png"
tools/cli/kernelrl report "$tmp/eval" > "$tmp/report.out" 2>&1 || fail "kernelrl report"
cmp "$tmp/report.md.eval" "$tmp/eval/report.md" || fail "kernelrl report rendered another report.md"
[ -s "$tmp/eval/speedups.png" ] && [ -s "$tmp/eval/outcomes.png" ] || fail "kernelrl report: no plots"
echo "ok   kernelrl report re-renders report.md and the plots"

echo 'no_such_field: 1' > "$tmp/bad.textproto"
for args in "--no_such_flag" "--rollouts=many" "--config=$tmp/bad.textproto" "--policy=nonsense" "--set=actor.nope=1"; do
  rc=0
  tools/cli/kernelrl eval $args > "$tmp/bad.out" 2> "$tmp/bad.err" || rc=$?
  [ $rc -eq 2 ] || fail "eval $args: exit $rc, want 2"
  [ "$(wc -l < "$tmp/bad.err")" -eq 1 ] || fail "eval $args: stderr is not one line: $(cat "$tmp/bad.err")"
  grep -q "^kernelrl eval: " "$tmp/bad.err" || fail "eval $args: $(cat "$tmp/bad.err")"
  echo "ok   eval $args -> exit 2: $(cat "$tmp/bad.err")"
done
echo PASS
