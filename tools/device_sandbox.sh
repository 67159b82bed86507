#!/usr/bin/env bash
# Sandbox checks on the GPU machine, in one go (docs/SANDBOX.md, "Device run").
#
#   here:   tools/device_sandbox.sh --prepare    # builds and fills .devcarry/sandbox
#   device: tools/device_sandbox.sh              # (run tool, carry .devcarry/sandbox)
#
# Runs the reference solutions (KernelBench level 1 and 2) and the CUDA exploit
# suite through the real worker core (sandbox_cli: compile -> isolated verify),
# the compile-latency benchmark (in the background, on CPU cores) and a small
# fixed-overhead measurement; writes everything under $OUT, prints a table last.
set -u
CARRY=.devcarry/sandbox
SOLUTIONS="sandbox/solutions"

if [ "${1:-}" = "--prepare" ]; then
  set -e
  SHARED=${KERNELRL_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
  bazel build //sandbox:sandbox_cli //sandbox/contain:libkernelrl_contain.so
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib" "$CARRY/kernelbench/level1" "$CARRY/kernelbench/level2"
  cp bazel-bin/sandbox/sandbox_cli bazel-bin/sandbox/contain/libkernelrl_contain.so "$CARRY/"
  ldd "$CARRY/sandbox_cli" | awk '/=> \// {print $3}' |
    grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux-x86-64|libpthread|libdl|librt)\.so' |
    xargs -I{} cp -L {} "$CARRY/lib/"
  for d in $SOLUTIONS/level1/* $SOLUTIONS/level2/*; do
    lvl=$(basename "$(dirname "$d")")
    cp "$SHARED/kernelbench/$lvl/$(basename "$d").py" "$CARRY/kernelbench/$lvl/"
  done
  du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-/tmp/sandbox_device_out}
mkdir -p "$OUT"
PY=$(command -v python3)
export LD_LIBRARY_PATH=$PWD/$CARRY/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
$PY -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'

# 1. Compile benchmark on CPU cores while the GPU suite runs.
[ "${SKIP_BENCH:-0}" = 1 ] || ( $PY tests/bench/sandbox_compile_bench.py --torch_builds "${TORCH_BUILDS:-2}" --out "$OUT/compile_bench.json" \
    > "$OUT/compile_bench.log" 2>&1 ) &
BENCH=$!

# 2. The suite: honest solutions must be OK, each exploit its own verdict.
SUITE=$OUT/suite.txt
: > "$SUITE"
for d in $SOLUTIONS/level1/* $SOLUTIONS/level2/*; do
  lvl=$(basename "$(dirname "$d")")
  echo "$lvl/$(basename "$d") $CARRY/kernelbench/$lvl/$(basename "$d").py $d OK" >> "$SUITE"
done
for d in sandbox/exploits/cuda/*; do
  exp=$(head -1 "$d/model_new.py" | sed -n 's/.*Expected verdict: \([A-Z_]*\).*/\1/p')
  echo "exploit/$(basename "$d") sandbox/testdata/gpu_tasks/relu.py $d $exp" >> "$SUITE"
done
# Honest code again after every exploit: no false rejection, worker healthy.
echo "after/level1/19_ReLU $CARRY/kernelbench/level1/19_ReLU.py $SOLUTIONS/level1/19_ReLU OK" >> "$SUITE"
echo "after/level2/76_Gemm_Add_ReLU $CARRY/kernelbench/level2/76_Gemm_Add_ReLU.py $SOLUTIONS/level2/76_Gemm_Add_ReLU OK" >> "$SUITE"
CLI="$CARRY/sandbox_cli --backend=cuda --python=$PY --harness_dir=$PWD/sandbox/harness \
  --contain_lib=$PWD/$CARRY/libkernelrl_contain.so"
$CLI --suite="$SUITE" --json_out="$OUT/verdicts.jsonl" --work_root=/tmp/kr_suite --wall_seconds="${WALL:-45}" \
  2> "$OUT/suite_stderr.log" | tee "$OUT/suite_table.txt"
SUITE_RC=${PIPESTATUS[0]}
cp /tmp/kr_suite/zygote.log "$OUT/zygote.log" 2>/dev/null

# 3. Fixed verify overhead: a tiny ReLU (64x1024) five times.
echo "overhead/relu_64x1024 sandbox/testdata/cpu_tasks/relu.py $SOLUTIONS/level1/19_ReLU OK" > "$OUT/overhead.txt"
$CLI --suite="$OUT/overhead.txt" --repeat=6 --json_out="$OUT/overhead.jsonl" --work_root=/tmp/kr_overhead \
  2>> "$OUT/suite_stderr.log" | tee "$OUT/overhead_table.txt"

wait $BENCH
cat "$OUT/compile_bench.log" | tail -8

# 4. Summary table.
$PY - "$OUT" <<'PYEOF'
import json, sys, statistics
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/verdicts.jsonl")]
def stage(v, name):
    return next((s.get("wall_ms", 0.0) for s in v.get("stages", []) if s["stage"] == name), 0.0)
ok = lambda r: r["verdict"].get("outcome") == r["expected"]
sol = [r for r in rows if not r["label"].startswith("exploit/")]
exp = [r for r in rows if r["label"].startswith("exploit/")]
l1 = [stage(r["verdict"], "verify") for r in sol if r["label"].startswith("level1/") and ok(r)]
over = [json.loads(l) for l in open(f"{out}/overhead.jsonl")]
ov = [stage(r["verdict"], "verify") for r in over[1:]]
print("\n== sandbox device summary ==")
print(f"solutions OK: {sum(map(ok, sol))}/{len(sol)}  (level1 {sum(ok(r) for r in sol if r['label'].startswith('level1/'))}, "
      f"level2 {sum(ok(r) for r in sol if r['label'].startswith('level2/'))})")
print(f"exploits with the expected verdict: {sum(map(ok, exp))}/{len(exp)}")
for r in rows:
    if not ok(r):
        print(f"  MISMATCH {r['label']}: expected {r['expected']} got {r['verdict'].get('outcome')}: {r['verdict'].get('summary','')[:160]}")
if l1:
    print(f"verify wall, level-1 KernelBench tasks: p50 {statistics.median(l1)/1e3:.2f} s  (n={len(l1)}, full-size inputs, 5 sets)")
if ov:
    print(f"verify wall, tiny ReLU (fixed overhead): p50 {statistics.median(ov)/1e3:.2f} s  (n={len(ov)})")
comp = [stage(r["verdict"], "compile") for r in sol if r["label"].startswith("level")]
if comp:
    print(f"contained fast-path compile (nvcc in the sandbox): p50 {statistics.median(comp)/1e3:.2f} s (n={len(comp)})")
try:
    b = json.load(open(f"{out}/compile_bench.json"))["summary"]
    for k, v in b.items():
        print(f"bench {k:12s} n={v['n']} p50 {v['p50_s']:.2f} s p90 {v['p90_s']:.2f} s ratio vs load_inline p50: {v['ratio_vs_load_inline_p50']}")
except Exception as e:
    print("compile bench missing:", e)
PYEOF
exit $SUITE_RC
