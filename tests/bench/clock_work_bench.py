"""What the reference's work inside a block's clock costs, between two
processes on one GPU as the reference and the executor are (docs/HARNESS.md,
"The seal, measured on one H200"):
  1. the pipe round trip;
  2. what the executor's next kernel pays when the reference's context ran
     just before (a context switch): after an SM copy, a `cudaMemcpy` device
     to device, the L2 flush, or nothing of ours;
  3. what the reference's next copy pays after the executor's kernel;
  4. the bandwidth of the reference's own work against the device's peak,
     blocks of 16 MB to 2 GB: the input copy (torch's copy_, the table
     kernel, cudaMemcpy), the seal (a keyed digest: one read) and the
     snapshot copy under the same digest;
  5. whether a cudaMemcpy write evicts the L2 as the SM flush does;
  6. what building a block's chunk table costs (locate, inside the clock).
Medians of REPEAT (host clock) unless said; bandwidths are the best of 5
after a warm-up, events, the L2 flushed before each, on random bytes.

    python3 tests/bench/clock_work_bench.py PATH/libkernelrl_verify_cuda.so [REPEAT]
"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sandbox", "harness"))


def executor():
    """The executor's half: answers one line per command on stdout."""
    import torch
    torch.cuda.set_device(0)
    x = torch.randn(16 << 20, device="cuda")   # 64 MB: a ~30 us ReLU
    y = torch.empty_like(x)
    hot = torch.randn(4 << 20, device="cuda")  # 16 MB: fits the L2
    sink = torch.empty((), device="cuda")
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.clamp(x, min=0, out=y)
    torch.cuda.synchronize()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        t0 = time.perf_counter()
        if cmd == "relu":
            torch.clamp(x, min=0, out=y)
            torch.cuda.synchronize()
        elif cmd == "read":  # events: the device time of one read of `hot`
            e0.record()
            torch.sum(hot, dim=0, out=sink)
            e1.record()
            torch.cuda.synchronize()
            print(f"{e0.elapsed_time(e1) * 1e3:.2f}", flush=True)
            continue
        elif cmd == "exit":
            break
        print(f"{(time.perf_counter() - t0) * 1e6:.2f}", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--executor":
        executor()
        return 0
    import torch
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return 0
    import reference
    import verify_cuda
    import wire
    err = verify_cuda.load(os.path.abspath(sys.argv[1]))
    if err:
        print(f"FAILED: {err}")
        return 1
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    child = subprocess.Popen([sys.executable, __file__, "--executor"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, bufsize=1)
    assert child.stdout.readline().strip() == "ready"

    def ask(cmd):
        child.stdin.write(cmd + "\n")
        child.stdin.flush()
        return float(child.stdout.readline())

    torch.cuda.set_device(0)
    props = torch.cuda.get_device_properties(0)
    src = torch.randint(0, 256, (16 << 20,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    flush_buf = torch.rand(int(2 * props.L2_cache_size) // 4, device="cuda")
    flush_u8 = flush_buf.view(torch.uint8)
    sink = torch.empty((), device="cuda")

    def sm_copy():
        dst.copy_(src)
        torch.cuda.synchronize()

    def memcpy_copy():
        verify_cuda._check(verify_cuda._LIB.krv_copy(dst.data_ptr(), src.data_ptr(), src.numel()), "krv_copy")
        torch.cuda.synchronize()

    def memcpy_flush():  # the flush buffer overwritten by cudaMemcpy
        verify_cuda._check(verify_cuda._LIB.krv_copy(flush_u8.data_ptr() + flush_u8.numel() // 2,
                                                     flush_u8.data_ptr(), flush_u8.numel() // 2), "krv_copy")
        torch.cuda.synchronize()

    def sm_flush():
        torch.sum(flush_buf, dim=0, out=sink)
        torch.cuda.synchronize()

    def med(xs):
        return statistics.median(xs)

    def after_ours(cmd, before):
        """The executor's `cmd` (median), each right after one of its own and then our `before`."""
        xs = []
        for _ in range(repeat):
            ask(cmd)
            if before:
                before()
            xs.append(ask(cmd))
        return med(xs)

    # 1. The pipe round trip (no GPU work on either side).
    rt = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        child.stdin.write("nop\n")
        child.stdin.flush()
        child.stdout.readline()
        rt.append((time.perf_counter() - t0) * 1e6)
    print(f"pipe round trip: {med(rt):.1f} us")

    # 2. The executor's ReLU (go -> its sync), after nothing of ours or after our work.
    for name, before in (("nothing of ours", None), ("our SM copy", sm_copy), ("our cudaMemcpy", memcpy_copy),
                         ("our SM flush", sm_flush), ("our cudaMemcpy flush", memcpy_flush)):
        print(f"executor ReLU (64 MB) after {name}: {after_ours('relu', before):.1f} us")

    # 3. Our copy right after the executor's ReLU, against after our own.
    for name, op in (("SM copy", sm_copy), ("cudaMemcpy", memcpy_copy)):
        own, after = [], []
        for _ in range(repeat):
            op()
            t0 = time.perf_counter()
            op()
            own.append((time.perf_counter() - t0) * 1e6)
            ask("relu")
            t0 = time.perf_counter()
            op()
            after.append((time.perf_counter() - t0) * 1e6)
        print(f"our 16 MB {name}: {med(own):.1f} us after our own, {med(after):.1f} us after the executor's ReLU")

    # 4. Bandwidth of our own work in the clock, events.
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    peak = reference.peak_copy_bytes_per_us("cuda")
    print(f"peak {peak / 1e3:.0f} GB/s (memory clock x bus width); bytes | work | us | GB/s moved | % of peak")
    for mb in (16, 128, 1024, 2048):
        a = torch.randint(0, 256, (mb << 20,), dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        table = wire._chunks([(a.data_ptr(), b.data_ptr(), a.numel())])
        digest = torch.zeros(1, dtype=torch.int64, device="cuda")
        for name, passes, fn in (
                ("input copy (torch copy_)", 2, lambda: b.copy_(a)),
                ("input copy (cudaMemcpy)", 2, lambda: verify_cuda._LIB.krv_copy(b.data_ptr(), a.data_ptr(), a.numel())),
                ("seal (digest, read only)", 1, lambda: verify_cuda.table_digest(table, 7, digest)),
                ("snapshot copy + digest", 2, lambda: verify_cuda.table_digest(table, 7, digest, copy=True))):
            fn()
            best = float("inf")
            for _ in range(5):
                sm_flush()
                e0.record()
                fn()
                e1.record()
                torch.cuda.synchronize()
                best = min(best, e0.elapsed_time(e1) * 1e3)
            moved = passes * a.numel()
            print(f"{mb} MB | {name} | {best:.1f} | {moved / best / 1e3:.0f} | {100 * moved / best / peak:.1f}")
        del a, b

    # 5. The L2: the executor's read of 16 MB, hot, after our SM flush, after our CE write.
    for name, before in (("hot", None), ("after our SM flush", sm_flush),
                         ("after our cudaMemcpy write of 2x L2", memcpy_flush)):
        print(f"executor read of 16 MB {name}: {after_ours('read', before):.2f} us (events)")
    # 6. The table of a block's output chunks (built inside the clock by locate).
    for n in (1, 170):
        xs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            wire._chunks([(src.data_ptr(), dst.data_ptr(), 1 << 24)] * n)
            xs.append((time.perf_counter() - t0) * 1e6)
        print(f"chunk table of {n} outputs: {med(xs):.1f} us")
    child.stdin.write("exit\n")
    child.stdin.flush()
    child.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
