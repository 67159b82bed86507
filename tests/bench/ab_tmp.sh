set -u
python3 tests/bench/seal_bench.py .devcarry/sandbox/libkernelrl_verify_cuda.so 10 > $OUT/seal_bench.txt 2>&1; cat $OUT/seal_bench.txt
for v in after before; do
  H=sandbox/harness; [ $v = before ] && H=.devcarry/before/sandbox/harness
  HARNESS=$H OUT=$OUT/$v LOAD=0 REPEAT=${REPEAT:-8} SIZES='relu_10us|relu_100us|relu_1ms|matmul_3ms' PRECOMPUTE_WALL=100 SUITE_WALL=${SW:-140} \
    bash tests/bench/trusted_timing_h100.sh > $OUT/$v.log 2>&1
  echo "== $v"; grep -A8 "^load=" $OUT/$v.log | cut -c1-400
  tar czf $OUT/$v.tgz -C $OUT $v 2>/dev/null; rm -rf $OUT/$v/load0/suite_stderr.log
done
