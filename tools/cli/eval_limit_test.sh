#!/usr/bin/env bash
# `kernelrl eval --wall_limit_s` (CPU sandbox): the policy is a TCP port that accepts and never
# answers, so no rollout can finish, whatever the machine's load: at the limit the evaluation
# abandons its rollouts, writes report.json with no task scored and a "cut" naming both tasks, and
# exits 0 without waiting for them (the policy's own timeout is 600 s).
# `kernelrl report` then re-renders report.md with the same cut line.
set -euo pipefail
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
REPO=$(dirname "$(dirname "$(dirname "$(realpath tools/cli/eval_limit_test.sh)")")")
SHARED="${KERNELRL_SHARED_DIR:-$REPO/../shared}"
if [ ! -d "$SHARED/kernelbench/level1" ]; then
  echo "SKIP: no KernelBench level 1 at $SHARED/kernelbench/level1 (set KERNELRL_SHARED_DIR)"
  exit 0
fi
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log "$tmp"/run/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done; exit 1; }

python3 agent/tokenizer/testdata/make_tokenizer_fixtures.py "$tmp/tok" chat > "$tmp/tok.log" 2>&1 || fail "tokenizer"
python3 - "$tmp/port" > "$tmp/silent.log" 2>&1 <<'PYEOF' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
held = []
while True:
    held.append(s.accept()[0])  # Never a byte back.
PYEOF
silent=$!
trap 'kill $silent 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || fail "no port"

rc=0
tools/cli/kernelrl eval --policy=grpc:127.0.0.1:"$(cat "$tmp/port")" --tokenizer="$tmp/tok/tokenizer.json" \
  --tasks=kernelbench:level1:12,7 --kernelbench_dir="$SHARED/kernelbench" --concurrency=2 --wall_limit_s=10 \
  --sandbox_backend=cpu --bin_dir="$PWD" --run_dir="$tmp/run" --out="$tmp/eval" --set=plot_script= \
  > "$tmp/eval.log" 2>&1 || rc=$?
cat "$tmp/eval.log"
[ "$rc" = 0 ] || fail "kernelrl eval exited $rc"
grep -q "cut at the 10 s limit: 0 of 2 tasks scored" "$tmp/eval.log" || fail "no cut line"
python3 - "$tmp/eval" <<'PYEOF' || fail "report checks"
import json, sys
out = sys.argv[1]
r = json.load(open(out + "/report.json"))
assert r["tasks"] == [], r["tasks"]
cut = r["cut"]
assert cut["wall_limit_s"] == 10, cut
# In task order (by KernelBench number).
assert cut["tasks_unfinished"] == ["level1/7_Matmul_with_small_K_dimension_", "level1/12_Matmul_with_diagonal_matrices_"], cut
assert cut["rollouts_unfinished"] == 2, cut
assert open(out + "/report.md").read().startswith("Cut at the 10 s limit: 0 tasks scored, 2 unfinished (2 rollouts)")
print("ok   report.json: no task scored, both named in its cut")
PYEOF
# `kernelrl report` re-renders report.md from report.json: the cut line stays above Table 1.
rm "$tmp/eval/report.md"
tools/cli/kernelrl report "$tmp/eval" --set=plot_script= > "$tmp/report.log" 2>&1 || fail "kernelrl report exited $?"
head -1 "$tmp/eval/report.md" | grep -q "^Cut at the 10 s limit: 0 tasks scored, 2 unfinished (2 rollouts)" ||
  fail "kernelrl report dropped the cut line: $(head -1 "$tmp/eval/report.md")"
echo "ok   kernelrl report keeps the cut line"
