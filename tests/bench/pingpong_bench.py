"""What a trusted block's fixed overhead is made of, on the GPU machine: two
processes (each its own CUDA context, as the reference process and the
executor are) hand a token back and forth over pipes, with and without GPU
work and syncs on each side, optionally with the CUPTI recorder injected into
the second (KPROF=path). Prints the median round trip of each variant.

    python3 tests/bench/pingpong_bench.py [--kprof LIB] [--rounds N]"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def child(r, w, mode, kprof):
    if kprof:
        os.environ["CUDA_INJECTION64_PATH"] = kprof
    import torch
    x = torch.rand(1 << 20, device="cuda")
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    if kprof:
        sys.path.insert(0, os.getcwd())
        from profiler_service.harness import kprof as kp
        rec = kp.load()
        rec.begin(kp.TAG_TIMED)
    os.write(w, b"r")
    while True:
        b = os.read(r, 1)
        if not b or b == b"q":
            break
        if mode >= 1:
            if mode >= 2:
                torch.mul(x, 2.0, out=y)
            torch.cuda.synchronize()
        os.write(w, b"d")
    if kprof:
        rec.end()


def run(mode, kprof, rounds):
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    proc = subprocess.Popen([sys.executable, __file__, "--child", f"{a_r},{b_w},{mode}", "--kprof", kprof],
                            pass_fds=(a_r, b_w))
    os.close(a_r)
    os.close(b_w)
    import torch
    x = torch.rand(1 << 20, device="cuda")
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    os.read(b_r, 1)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        if mode >= 1:
            y.copy_(x)
            torch.cuda.synchronize()
        os.write(a_w, b"g")
        os.read(b_r, 1)
        if mode >= 1:
            y.copy_(x)
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    os.write(a_w, b"q")
    proc.wait()
    return statistics.median(times[rounds // 10:]), min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kprof", default="")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--child", default="")
    a = ap.parse_args()
    if a.child:
        r, w, mode = (int(v) for v in a.child.split(","))
        child(r, w, mode, a.kprof)
        return
    names = {0: "pipes only", 1: "+ a sync on each side, a copy in the first", 2: "+ an elementwise op (4 MB) in the second"}
    for kprof in ([""] + ([a.kprof] if a.kprof else [])):
        for mode in (0, 1, 2):
            med, lo = run(mode, kprof, a.rounds)
            print(f"{names[mode]:45s} cupti={'on ' if kprof else 'off'}  round trip p50 {med:8.1f} us  min {lo:8.1f} us",
                  flush=True)


if __name__ == "__main__":
    main()
