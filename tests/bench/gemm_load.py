"""A second process on the benchmark's GPU, busy the whole time: batches of 20
GEMMs of 8192^2 in its own CUDA context (tests/bench/trusted_timing_h100.sh,
tests/bench/verdict_throughput.sh).

  python3 tests/bench/gemm_load.py LEASE IDLE_S [COUNT_FILE]

LEASE (or ""): the worker's GPU lease file (common/gpu_lease.h), taken shared
around each batch as a learner does around its steps, the turn file first and
the stamps a shared holder leaves. IDLE_S: seconds of rest between batches.
COUNT_FILE: rewritten after each batch with "<batches> <seconds since start>"."""
import fcntl
import os
import sys
import time

import torch


def stamp(path):  # as GpuLease does for a shared holder: the worker settles from the last release
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    now = time.time_ns()
    os.utime(fd, ns=(now, now))
    os.close(fd)


def main():
    lease, idle = sys.argv[1], float(sys.argv[2])
    count_file = sys.argv[3] if len(sys.argv) > 3 else ""
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    print("load: running" + (" under the lease " + lease if lease else ""), flush=True)
    batches, t0 = 0, time.time()
    while True:
        held = None
        if lease:  # the turn first (a waiting timer holds it), then the lease shared
            turn = os.open(lease + ".turn", os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(turn, fcntl.LOCK_EX)
            os.close(turn)
            held = os.open(lease, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(held, fcntl.LOCK_SH)
            stamp(lease + ".shared_taken")
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        if held is not None:
            stamp(lease + ".shared_released")  # still held, as GpuLease stamps it
            os.close(held)
        if idle > 0:
            time.sleep(idle)
        batches += 1
        if count_file:
            with open(count_file, "w") as f:
                f.write(f"{batches} {time.time() - t0:.3f}\n")
        if batches % 100 == 0:
            print(f"load: {batches} batches of 20 GEMMs", flush=True)


if __name__ == "__main__":
    main()
