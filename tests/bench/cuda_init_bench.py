"""Where a fresh harness process's CUDA start goes (docs/HARNESS.md, "The
design with GPU turns, whole"): children forked from a parent that imported torch and
never CUDA, as the zygote forks a job's two processes, each timing its steps:
the driver's cuInit, the primary context (torch.cuda.set_device), torch's first
kernel, and the harness's CUDA library. Runs N at once, as N jobs' processes
start together on one worker.

    python3 tests/bench/cuda_init_bench.py [LIB] [ROUNDS] [N ...]   (GPU machine)

Prints, per N, the p50 and max of each step over ROUNDS rounds, milliseconds."""
import ctypes
import json
import os
import statistics
import sys
import time

import torch


def child(lib, w):
    t = [time.perf_counter()]
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    t.append(time.perf_counter())
    torch.cuda.set_device(0)
    t.append(time.perf_counter())
    torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    t.append(time.perf_counter())
    if lib:
        ctypes.CDLL(lib)
    t.append(time.perf_counter())
    steps = [(b - a) * 1e3 for a, b in zip(t, t[1:])]
    os.write(w, (json.dumps({"rc": rc, "steps": steps}) + "\n").encode())
    os._exit(0)


def round_of(n, lib):
    pipes, pids = [], []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            child(lib, w)
        os.close(w)
        pipes.append(r)
        pids.append(pid)
    out = []
    for r, pid in zip(pipes, pids):
        with os.fdopen(r) as f:
            line = f.readline()
        os.waitpid(pid, 0)
        rep = json.loads(line) if line else None
        if not rep or rep["rc"] != 0:
            raise SystemExit(f"a child failed: {line!r}")
        out.append(rep["steps"])
    return out


def main():
    lib = sys.argv[1] if len(sys.argv) > 1 else ""
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    sizes = [int(x) for x in sys.argv[3:]] or [1, 2, 6]
    if torch.cuda.is_initialized():
        raise SystemExit("the parent initialised CUDA")
    names = ("cuInit", "context", "first_kernel", "harness_lib", "total")
    for n in sizes:
        rows = []
        for _ in range(rounds):
            rows += [s + [sum(s)] for s in round_of(n, lib)]
        cells = [f"{name} p50 {statistics.median(c):.0f} max {max(c):.0f}" for name, c in zip(names, zip(*rows))]
        print(f"{n} at once ({len(rows)} processes): " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
