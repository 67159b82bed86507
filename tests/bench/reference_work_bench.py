"""Where the reference process's wall goes per forward of a profile block, on
a GPU: drawing the inputs and the Model's outputs (sets.make, one by one with
a wait each, against make_block's one wait per block), their parts, and the
check of the outputs (torch, output by output, against the batched launch).

    python3 tests/bench/reference_work_bench.py LIB [TASK.py ...]

LIB is libkernelrl_verify_cuda.so; the tasks default to the ReLU sizes of
sandbox/testdata/gpu_tasks/sizes. Figures are per forward, the best of three
rounds of B forwards (B as a block of that task would hold, at most 256)."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "sandbox", "harness"))

import torch  # noqa: E402

import inputs  # noqa: E402
import loader  # noqa: E402
import precision  # noqa: E402
import reference  # noqa: E402
import verify_cuda  # noqa: E402


def per_forward_us(fn, count, rounds=3):
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / count * 1e6)
    return best


def bench(path):
    mod = loader.load_module(path, "bench_task")
    model, _ = inputs.make_model(mod, 1, "cuda")
    policy = precision.Policy("strict", model, 4.0, 16.0, 1 << 33)
    sets = reference.InputSets(mod, policy, inputs.DEFAULT_CYCLE, "cuda", 12345)
    out_bytes = sum(o.nbytes for o in sets.make()[2]["lo"])
    count = max(8, min(256, (8 << 30) // max(1, 6 * out_bytes)))
    print(f"{os.path.basename(path)}: outputs {out_bytes / 2**20:.0f} MiB, B = {count}")
    rows = []
    rows.append(("make, one by one (a wait each)", per_forward_us(lambda: [sets.make() for _ in range(count)], count)))
    rows.append(("make_block (one wait)", per_forward_us(lambda: sets.make_block(count), count)))
    # Its parts, for the task's own distribution and a redrawn one.
    rows.append(("  manual_seed", per_forward_us(lambda: [torch.manual_seed(k) for k in range(count)], count)))

    def task_inputs():
        for k in range(count):
            with torch.device("cuda"):
                mod.get_inputs()
    rows.append(("  get_inputs under torch.device", per_forward_us(task_inputs, count)))
    rows.append(("  make_inputs, normal", per_forward_us(
        lambda: [inputs.make_inputs(mod, k, "normal", "cuda") for k in range(count)], count)))
    xs = inputs.make_inputs(mod, 7, "normal", "cuda")
    rows.append(("  the Model (lo)", per_forward_us(lambda: [policy.lo(xs) for _ in range(count)], count)))
    lo = policy.lo(xs)
    rows.append(("  the fp64 Model (hi)", per_forward_us(lambda: [policy.hi(xs, lo) for _ in range(count)], count)))
    hi = policy.hi(xs, lo)
    got = lo[0].reshape(-1).clone()
    meta = {"type": "Tensor", "layout": "torch.strided", "device": "cuda", "dtype": str(lo[0].dtype),
            "shape": list(lo[0].shape)}

    def one_by_one():
        for _ in range(count):
            reference.compare(lo[0], meta, got, 1e-2, 1e-2)
            policy.norm_check(got.view(lo[0].shape), lo[0], hi[0])

    def batched():
        batch = reference._CheckBatch(1e-2, 1e-2)
        for k in range(count):
            batch.add(got, lo[0], hi[0] if k < reference.NORM_CHECKS_PER_BLOCK else None, False)
        batch.read()
    rows.append(("check: compare + fp64 norm, one by one", per_forward_us(one_by_one, count)))
    rows.append(("check: batched launch, fp64 norm on 8", per_forward_us(batched, count)))
    for name, us in rows:
        print(f"  {name:<44} {us:9.1f} us a forward")


def main():
    if not torch.cuda.is_available():
        print("SKIPPED: no GPU")
        return 0
    torch.cuda.set_device(0)
    err = verify_cuda.load(sys.argv[1] if len(sys.argv) > 1 else "")
    if err:
        print(f"FAILED: {err}")
        return 1
    tasks = sys.argv[2:] or [os.path.join(ROOT, "sandbox/testdata/gpu_tasks/sizes", f"relu_{s}.py")
                             for s in ("10us", "100us", "1ms")]
    for t in tasks:
        bench(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
