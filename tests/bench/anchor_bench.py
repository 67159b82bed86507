"""How steady the drift anchor is (profiler_service/harness/backends.py,
event_anchor): the judge declines a verdict (device_drift) when the median of
the candidate's anchor samples is more than anchor_drift_tolerance off the
baseline's. A slow candidate gets two samples (after the warm-up and at the
end), so a single sample's spread decides whether an honest kernel is judged.

Two ways of timing the same 256 MB device copy, interleaved:
  single   the anchor before baseline protocol 3: sync, event, copy, event,
           sync (the GPU is idle when the first event records, so the
           interval starts with the device's clock ramp and the launch);
  queued   event_anchor since, called here: sync, an untimed copy, event,
           COPIES copies, event, sync: the events and the timed copies are
           enqueued behind a running copy, so the interval holds device time
           only; per copy.
under five conditions: quiet (20 ms idle between samples), a long kernel
(an fp32 8192^3 matmul, 50-80 ms) before each sample, the same kernel in
another process before each sample (the executor's block, then the
reference's anchor), every core spinning on the host (the sandbox beside nvcc
compiles and actors), and the last two together.

Per condition and way: median, p5, p95, and how often a two-sample median
(what a slow candidate's profile has) is more than 10% and 25% off the quiet
median of the same way (the baseline's side). Measured: docs/PROFILER.md.

    python3 tests/bench/anchor_bench.py [SAMPLES] [COPIES]
"""
import multiprocessing
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from profiler_service.harness import backends  # noqa: E402  (the anchor the judge compares)

NBYTES = 256 << 20


def spin(stop):
    while not stop.is_set():
        pass


def other_process(conn):
    """Another CUDA context, as the candidate's executor is: one long kernel
    and a sync a command, so that the anchor is the first work of its own
    context after another's (a context switch), as in the profile stage."""
    torch.cuda.set_device(0)
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    torch.mm(a, b)
    torch.cuda.synchronize()
    conn.send("ready")
    while conn.recv() == "go":
        torch.mm(a, b)
        torch.cuda.synchronize()
        conn.send("done")


def single(src, dst, ev0, ev1):
    torch.cuda.synchronize()
    ev0.record()
    dst.copy_(src)
    ev1.record()
    torch.cuda.synchronize()
    return ev0.elapsed_time(ev1) * 1e3


def queued(src, dst, ev0, ev1):
    return backends.event_anchor(src, dst, ev0, ev1)["event_us"]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def off_rate(xs, ref, tol, rng, pairs=4000):
    bad = 0
    for _ in range(pairs):
        a, b = rng.sample(xs, 2)
        bad += abs((a + b) / 2 / ref - 1.0) > tol
    return bad / pairs


def main():
    if not torch.cuda.is_available():
        print("anchor_bench: no CUDA device", file=sys.stderr)
        return 2
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    copies = int(sys.argv[2]) if len(sys.argv) > 2 else backends.ANCHOR_COPIES
    backends.ANCHOR_COPIES = copies  # the shipped anchor, with this many timed copies
    torch.cuda.set_device(0)
    src = torch.rand(NBYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        single(src, dst, ev0, ev1)
        queued(src, dst, ev0, ev1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(3):
        torch.mm(a, b)
    torch.cuda.synchronize()
    mm_ms = (time.perf_counter() - t) / 3 * 1e3
    print(f"device {torch.cuda.get_device_name(0)}; host cores {os.cpu_count()}; {samples} samples a cell; "
          f"queued = {copies} copies; fp32 8192^3 matmul {mm_ms:.2f} ms")

    def run(before):
        out = {"single": [], "queued": []}
        for i in range(samples):
            order = ("single", "queued") if i % 2 == 0 else ("queued", "single")
            for way in order:
                before()
                out[way].append(single(src, dst, ev0, ev1) if way == "single"
                                else queued(src, dst, ev0, ev1))
        return out

    def idle():
        torch.cuda.synchronize()
        time.sleep(0.02)

    def kernel():
        torch.mm(a, b)  # not synchronised: the anchor's own sync waits

    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    other = ctx.Process(target=other_process, args=(there,))
    other.start()
    if here.recv() != "ready":
        raise RuntimeError("the other process did not start")

    def other_kernel():
        torch.cuda.synchronize()
        here.send("go")
        if here.recv() != "done":
            raise RuntimeError("the other process failed")

    results = {}
    stop = ctx.Event()
    for name, before, load in (("quiet", idle, False), ("after long kernel", kernel, False),
                               ("after other process", other_kernel, False),
                               ("host cores busy", idle, True), ("busy + other process", other_kernel, True)):
        spinners = []
        if load:
            spinners = [ctx.Process(target=spin, args=(stop,)) for _ in range(os.cpu_count() or 2)]
            for p in spinners:
                p.start()
            time.sleep(0.5)
        try:
            results[name] = run(before)
        finally:
            stop.set()
            for p in spinners:
                p.join()
            stop.clear()

    here.send("stop")
    other.join()
    rng = random.Random(7)
    print(f"{'condition':20s} {'way':7s} {'median us':>10s} {'p5':>8s} {'p95':>8s} {'p95/p5':>7s} "
          f"{'2-sample median off quiet by >10%':>34s} {'>25%':>6s}")
    for name, out in results.items():
        for way in ("single", "queued"):
            xs = out[way]
            ref = statistics.median(results["quiet"][way])
            print(f"{name:20s} {way:7s} {statistics.median(xs):10.1f} {pct(xs, 0.05):8.1f} {pct(xs, 0.95):8.1f} "
                  f"{pct(xs, 0.95) / pct(xs, 0.05):7.2f} {off_rate(xs, ref, 0.10, rng):34.3f} "
                  f"{off_rate(xs, ref, 0.25, rng):6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
