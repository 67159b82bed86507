#!/usr/bin/env bash
# data_synth end to end on the CPU, killed with SIGKILL mid-run and resumed:
# the resumed run finishes the target, decides every candidate index once,
# keeps the records of the killed run, leaves no worker behind, and writes the
# dataset, the Table-3 report and the histogram.
set -euo pipefail
BIN=$(realpath "$1")
ROOT=$PWD
OUT="${TEST_TMPDIR:-/tmp}/resume_run"
rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")"
# KERNELRL_SHARED_DIR, else ../shared next to the checkout (through a runfile's real path).
REPO=$(dirname "$(dirname "$(dirname "$(realpath data/testdata/pass.py)")")")
SHARED="${KERNELRL_SHARED_DIR:-$REPO/../shared}"
KB=""; [ -d "$SHARED/kernelbench/level1" ] && KB="$SHARED/kernelbench"
ARGS=(--set=out_dir="$OUT" --set=harness_root="$ROOT" --set=ops_file=data/testdata/ops_small.textproto
      --set=kernelbench_root="$KB" --set=kernelbench_levels=level1 --set=target_accepted=8 --set=workers=2
      --set=worker_threads=1 --set=filters.compile_backend=aot_eager --set=progress_every_s=2
      --set=sampler.min_target_ms=2 --set=sampler.max_target_ms=10 --set=seed=$RANDOM)

"$BIN" "${ARGS[@]}" > "$OUT.first.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do  # Until the killed run has decided a few candidates.
  n=0; [ -f "$OUT/state/journal.jsonl" ] && n=$(wc -l < "$OUT/state/journal.jsonl")
  [ "$n" -ge 3 ] && break
  kill -0 $PID 2>/dev/null || { cat "$OUT.first.log"; echo "FAIL: first run ended early"; exit 1; }
  sleep 0.1
done
kill -9 $PID
wait $PID 2>/dev/null || true
before=$(wc -l < "$OUT/state/journal.jsonl")
echo "killed after $before decided candidates"
sleep 1
if pgrep -f "data.harness.worker" -P $PID > /dev/null 2>&1; then echo "FAIL: workers outlived the driver"; exit 1; fi
[ -f "$OUT/dataset.jsonl" ] && { echo "FAIL: outputs written by a killed run"; exit 1; }

"$BIN" "${ARGS[@]}" > "$OUT.second.log" 2>&1 || { cat "$OUT.second.log"; echo "FAIL: resumed run failed"; exit 1; }
grep -q "resume: $before candidates already decided" "$OUT.second.log" ||
  { cat "$OUT.second.log"; echo "FAIL: no resume line for $before"; exit 1; }
python3 - "$OUT" "$before" <<'PY'
import json, sys
out, before = sys.argv[1], int(sys.argv[2])
journal = [json.loads(l) for l in open(f"{out}/state/journal.jsonl")]
idx = [r.get("index", 0) for r in journal]
assert len(idx) == len(set(idx)), "an index decided twice"
assert len(journal) > before, "the resumed run decided nothing"
data = [json.loads(l) for l in open(f"{out}/dataset.jsonl")]
acc = [r for r in journal if r["verdict"] == "accepted"]
assert len(data) == len(acc) >= 8, (len(data), len(acc))
for d in data:
    t = d["task"]
    assert "class Model(nn.Module)" in t["reference_source"] and "def get_inputs" in t["reference_source"]
    assert len(t["content_hash"]) == 64 and d["num_operators"] == len(d["operators"]) >= 1
    assert d["eager_us"] > 0
report = open(f"{out}/report.md").read()
for needle in ("| 1 torch operator |", "| 2 torch operators |", "| transformers (standalone) |", "| runtime |"):
    assert needle in report, needle
print(f"resume ok: {before} decided before the kill, {len(journal)} in all, {len(data)} accepted")
PY
[ -s "$OUT/similarity.json" ] || { echo "FAIL: no similarity.json"; exit 1; }
if python3 -c "import matplotlib" 2>/dev/null; then [ -s "$OUT/similarity.png" ] || { echo "FAIL: no PNG"; exit 1; }; fi
echo PASS
