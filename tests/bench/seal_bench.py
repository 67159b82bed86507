"""What the reference's own work inside a block's clock costs against the
peak it is taken off at (docs/HARNESS.md, "Tolerances"): the input copy
(torch's copy_, and the table kernel's), the seal (a keyed digest of the
outputs where they lie: one read) and the snapshot copy it replaced, at
block sizes from 16 MB to 2 GB. Events time each in this process, best of
REPEAT after a warm-up, on fresh random bytes, the L2 flushed before each.

    python3 tests/bench/seal_bench.py PATH/libkernelrl_verify_cuda.so [REPEAT]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sandbox", "harness"))

import torch  # noqa: E402

import reference  # noqa: E402
import verify_cuda  # noqa: E402
import wire  # noqa: E402


def timed(fn, flush, repeat):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    best = float("inf")
    for _ in range(repeat):
        flush()
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        best = min(best, e0.elapsed_time(e1) * 1e3)
    return best


def main():
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return 0
    err = verify_cuda.load(os.path.abspath(sys.argv[1]))
    if err:
        print(f"FAILED: {err}")
        return 1
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    peak = reference.peak_copy_bytes_per_us("cuda")
    props = torch.cuda.get_device_properties(0)
    big = torch.empty(int(2 * props.L2_cache_size) // 4, device="cuda")
    sink = torch.empty((), device="cuda")

    def flush():
        torch.sum(big, dim=0, out=sink)

    print(f"{props.name}: peak {peak / 1e3:.0f} GB/s (memory clock x bus width)")
    print("bytes | work | us | GB/s moved | % of peak")
    for mb in (16, 128, 1024, 2048):
        n = mb << 20
        src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        table = wire._chunks([(src.data_ptr(), dst.data_ptr(), n)])
        out = torch.zeros(1, dtype=torch.int64, device="cuda")
        cases = [("input copy (torch copy_)", 2, lambda: dst.copy_(src)),
                 ("input copy (table kernel)", 2, lambda: verify_cuda.table(verify_cuda.TABLE_COPY, table)),
                 ("seal (digest, read only)", 1, lambda: verify_cuda.table_digest(table, 7, out)),
                 ("snapshot copy + digest", 2, lambda: verify_cuda.table_digest(table, 7, out, copy=True))]
        for name, passes, fn in cases:
            us = timed(fn, flush, repeat)
            moved = passes * n
            print(f"{mb} MB | {name} | {us:.1f} | {moved / us / 1e3:.0f} | {100 * moved / us / peak:.1f}")
        del src, dst
    return 0


if __name__ == "__main__":
    sys.exit(main())
