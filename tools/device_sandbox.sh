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
[ "${SKIP_BENCH:-0}" = 1 ] && BENCH=""

# 2. One suite, most important first (results are flushed per entry, so a
#    run cut short still reports what it finished): the fixed overhead on a
#    tiny ReLU, every exploit, honest code again, then the reference solutions
#    (small outputs first, the 6.4 GB-output elementwise tasks last).
SUITE=$OUT/suite.txt
: > "$SUITE"
for i in 1 2 3 4 5 6; do
  echo "overhead/relu_64x1024_$i sandbox/testdata/cpu_tasks/relu.py $SOLUTIONS/level1/19_ReLU OK" >> "$SUITE"
done
for d in sandbox/exploits/cuda/*; do
  exp=$(head -1 "$d/model_new.py" | sed -n 's/.*Expected verdict: \([A-Z_]*\).*/\1/p')
  echo "exploit/$(basename "$d") sandbox/testdata/gpu_tasks/relu.py $d $exp" >> "$SUITE"
done
echo "after/gpu_relu_1GiB sandbox/testdata/gpu_tasks/relu.py $SOLUTIONS/level1/19_ReLU OK" >> "$SUITE"
BIG="19_ReLU 21_Sigmoid 22_Tanh 25_Swish 32_HardTanh"
for d in $SOLUTIONS/level2/* $SOLUTIONS/level1/*; do
  case " $BIG " in *" $(basename "$d") "*) continue ;; esac
  lvl=$(basename "$(dirname "$d")")
  echo "$lvl/$(basename "$d") $CARRY/kernelbench/$lvl/$(basename "$d").py $d OK" >> "$SUITE"
done
for b in $BIG; do
  echo "level1/$b $CARRY/kernelbench/level1/$b.py $SOLUTIONS/level1/$b OK" >> "$SUITE"
done
CLI="$CARRY/sandbox_cli --backend=cuda --python=$PY --harness_dir=$PWD/sandbox/harness \
  --contain_lib=$PWD/$CARRY/libkernelrl_contain.so"
( sleep 20; cp /tmp/kr_suite/zygote.log "$OUT/zygote.log" 2>/dev/null ) &
$CLI --suite="$SUITE" --json_out="$OUT/verdicts.jsonl" --work_root=/tmp/kr_suite --wall_seconds="${WALL:-45}" \
  2> "$OUT/suite_stderr.log" | tee "$OUT/suite_table.txt"
SUITE_RC=${PIPESTATUS[0]}
cp /tmp/kr_suite/zygote.log "$OUT/zygote.log" 2>/dev/null

[ -n "${BENCH:-}" ] && wait $BENCH && tail -8 "$OUT/compile_bench.log"

# 4. Summary table.
$PY - "$OUT" <<'PYEOF'
import json, sys, statistics
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/verdicts.jsonl")]
def stage(v, name):
    return next((s.get("wall_ms", 0.0) for s in v.get("stages", []) if s["stage"] == name), 0.0)
ok = lambda r: r["verdict"].get("outcome") == r["expected"]
sol = [r for r in rows if r["label"].startswith("level")]
exp = [r for r in rows if r["label"].startswith("exploit/")]
l1 = [stage(r["verdict"], "verify") for r in sol if r["label"].startswith("level1/") and ok(r)]
ov = [stage(r["verdict"], "verify") for r in rows if r["label"].startswith("overhead/")][1:]
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
