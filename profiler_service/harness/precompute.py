"""Baseline precompute: eager and torch.compile (default mode) times for a task
set, under the same protocol as candidates, one BaselineMeasurement JSON line
per task (failures recorded, never dropped).

    python3 -m profiler_service.harness.precompute --tasks_root DIR --out FILE.jsonl \
        [--levels level1,level2] [--workers N] [--budget_s S] [--deadline_s S] [--device cuda] [--threads N]

The reward's baselines are timed through the sandbox's executor path instead
(//sandbox:measure_baselines, docs/HARNESS.md "Baselines"); the lines this
in-process path writes carry timing_path "" and never pay a speed-up (the
sandbox treats them as missing). It remains for the data pipeline's eager
filter (data/harness/worker.py), and --warm_only fills torch.compile's caches
in parallel ahead of measure_baselines.

Workers (spawned processes) load and torch.compile tasks in parallel; a
readers-writer file lock (GpuLock) keeps every timed block alone on the GPU:
set-up (model, inputs, torch.compile and its first runs) holds it shared,
timing holds it exclusive, and a waiting timer stops new set-ups from starting. Eager and compiled are interleaved in blocks,
each with its own CUPTI activity, plus the trusted anchor between rounds.
profiler_service:precompute_baselines imports the lines into the cache.
"""
import argparse
import contextlib
import datetime
import fcntl
import gc
import json
import multiprocessing as mp
import os
import queue
import sys
import time
import traceback


class GpuLock:
    """Timing exclusive, GPU set-up shared, timers first.

    A timer takes the turnstile exclusively before waiting for the main lock,
    so set-ups that have not started yet wait behind it: the timed block never
    overlaps another worker's GPU work (which would inflate the baseline and
    the anchor), and timers are not starved by a stream of compiles.
    """

    def __init__(self, path):
        self.path, self.turnstile = path, path + ".turnstile"

    @contextlib.contextmanager
    def shared(self):
        with open(self.turnstile, "a") as gate, open(self.path, "a") as main:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(main, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self):
        with open(self.turnstile, "a") as gate, open(self.path, "a") as main:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(main, fcntl.LOCK_UN)
                fcntl.flock(gate, fcntl.LOCK_UN)


def _make_inputs_fn(mod, device):
    import torch

    def make_inputs(seed):
        torch.manual_seed(seed)
        with torch.device(device):
            raw = mod.get_inputs()
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in raw]
    return make_inputs


def _winners_kept(keep):
    """Inductor gives a reduction several Triton configs, benchmarks them at
    the compiled model's first call and keeps the winner in its cache dir,
    where a later process replays it. The warm-up's workers benchmark side by
    side on one GPU: on the H200 2 of 8 warm-ups of a row softmax kept a config
    47% slower than the one each of 8 single processes chose
    (tests/bench/compile_pick_bench.py), and measure_baselines then timed
    torch.compile with it, a baseline slow enough to pay 3 for a kernel that
    does not beat torch.compile. So the warm-up keeps no winner: the code it
    compiles carries that choice (the setting is outside the FX graph cache's
    key), and each process that runs it chooses at its own first call, which
    measure_baselines' executor makes alone on its GPU."""
    import torch._inductor.config as inductor_config
    return contextlib.nullcontext() if keep else inductor_config.patch(autotune_local_cache=False)


def measure_task(task_id, path, args, backend, lock_path):
    import torch
    from profiler_service.harness import protocol, tasks, work
    src = open(path).read()
    rec = {"task_id": task_id, "task_hash": tasks.task_hash(src, args.device),
           "input_policy_hash": tasks.input_policy_hash(args.device),
           "device": backend.device_info(),
           "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    mod = tasks.load_module(path)
    # lock_path None: the caller already holds the GPU (serial phase).
    lock = GpuLock(lock_path) if lock_path else None
    with (lock.shared() if lock else contextlib.nullcontext()), _winners_kept(not getattr(args, "warm_only", False)):
        torch.manual_seed(1234)
        with torch.device(args.device):
            model = mod.Model(*mod.get_init_inputs())
        model = model.to(args.device).eval()
        make_inputs = _make_inputs_fn(mod, args.device)
        compiled = torch.compile(model) if args.compile else None

        def eager_fn(*xs):
            with torch.no_grad():
                return model(*xs)

        def compiled_fn(*xs):
            with torch.no_grad():
                return compiled(*xs)

        t0 = time.monotonic()
        x = make_inputs(1)
        try:
            if compiled is None:
                raise RuntimeError("compile disabled (--no_compile)")
            compiled_fn(*x)  # Compiles under the shared lock: never during another worker's timing.
        except torch.cuda.OutOfMemoryError:
            raise  # Deferred to the serial phase by the worker.
        except Exception as e:  # noqa: BLE001 - recorded, the eager baseline still runs
            rec["compiled"] = {"label": "compiled", "backend": args.device,
                               "error": f"compile: {type(e).__name__}: {e}"}
            compiled_fn = None
        rec["compile_wall_s"] = time.monotonic() - t0
        rec["work"] = work.estimate(model, x)
        del x
        if args.device == "cuda":
            torch.cuda.synchronize()
    if getattr(args, "warm_only", False):
        # torch.compile's caches are filled, nothing is timed: the baselines
        # are then timed through the sandbox's executor path
        # (//sandbox:measure_baselines), whose compiles mostly load from them.
        failed = rec.get("compiled", {}).get("error")
        rec["error"] = f"warm_only: {failed}" if failed else "warm_only: compiled, not timed"
        return rec
    cfg = protocol.ProtocolConfig(target_rse=args.target_rse, time_budget_s=args.budget_s,
                                  min_samples=args.min_samples, max_samples=args.max_samples, warmup_calls=2,
                                  recheck_fraction=0.0, min_rechecks=0, block_calls=5)
    targets = [("eager", eager_fn)] + ([("compiled", compiled_fn)] if compiled_fn else [])
    seed = int.from_bytes(os.urandom(8), "little")
    with (lock.exclusive() if lock else contextlib.nullcontext()):
        runs, anchor = protocol.run_protocol(targets, make_inputs, backend, cfg, secret_seed=seed)
    for run in runs.values():  # Out of memory inside a timed call: defer the task too.
        if "OutOfMemoryError" in run.get("error", ""):
            raise torch.cuda.OutOfMemoryError(run["error"])
    rec.update(runs)
    rec["anchor"] = anchor
    return rec


def _worker(worker_id, jobs, results, args, lock_path, deadline):
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch
    from profiler_service.harness import backends
    if args.threads:
        torch.set_num_threads(args.threads)  # CPU baselines: as many threads as the sandbox gives a candidate
    backend = backends.make_backend(args.device, args.flush_multiple)
    while True:
        try:
            task_id, path = jobs.get_nowait()
        except queue.Empty:
            return
        if time.time() > deadline:
            results.put({"task_id": task_id, "error": "not_run: precompute deadline reached"})
            continue
        try:
            rec = measure_task(task_id, path, args, backend, lock_path)
        except torch.cuda.OutOfMemoryError as e:
            # Too big to share the GPU with the other workers: the parent runs
            # it again in the serial phase, alone on the GPU.
            rec = {"task_id": task_id, "deferred": True, "error": f"oom (parallel phase): {e}"[:300]}
        except Exception as e:  # noqa: BLE001 - recorded, not dropped
            rec = {"task_id": task_id, "error": f"{type(e).__name__}: {e}"[:500]}
        finally:
            torch._dynamo.reset()
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
        rec["worker"] = worker_id
        results.put(rec)


def _phase(ctx, todo, args, workers, deadline, out, t_start, allow_defer):
    """Runs `todo` on `workers` processes; writes finished records to `out` and
    returns the (task_id, path) pairs deferred for running alone."""
    jobs, results = ctx.Queue(), ctx.Queue()
    for t in todo:
        jobs.put(t)
    lock_path = os.path.join("/tmp", os.path.basename(args.out) + ".gpulock")
    procs = [ctx.Process(target=_worker, args=(i, jobs, results, args, lock_path, deadline))
             for i in range(max(1, workers))]
    for pr in procs:
        pr.start()
    done, deferred, paths = set(), [], dict(todo)
    while len(done) < len(todo):
        try:
            rec = results.get(timeout=5)
        except queue.Empty:
            if not any(pr.is_alive() for pr in procs):
                break
            continue
        done.add(rec["task_id"])
        if rec.get("deferred") and allow_defer:
            deferred.append((rec["task_id"], paths[rec["task_id"]]))
            continue
        if rec.pop("deferred", None):
            rec["error"] = rec["error"].replace("parallel phase", "alone on the GPU")
        out.write(json.dumps(rec) + "\n")
        out.flush()
        e = rec.get("eager", {}).get("samples", [])
        print(f"[{time.time() - t_start:6.1f}s] {rec['task_id']} "
              f"{'ERROR ' + rec['error'][:80] if rec.get('error') else f'eager n={len(e)}'}", flush=True)
    for tid, _ in todo:  # A worker that died takes its task with it: record that.
        if tid not in done:
            out.write(json.dumps({"task_id": tid, "error": "lost: worker exited without a result"}) + "\n")
    for pr in procs:
        pr.join(timeout=10)
    return deferred


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--tasks_root", required=True)
    p.add_argument("--levels", default="level1,level2")
    p.add_argument("--only", default="", help="comma-separated task ids (level1/19_ReLU)")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--budget_s", type=float, default=0.5)
    p.add_argument("--min_samples", type=int, default=10)
    p.add_argument("--target_rse", type=float, default=0.01)
    p.add_argument("--max_samples", type=int, default=300)
    p.add_argument("--deadline_s", type=float, default=1e9)
    p.add_argument("--device", default="cuda")
    p.add_argument("--flush_multiple", type=float, default=2.0, help="cache flush size / L2 (or LLC) size")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads per worker (0 = torch default)")
    p.add_argument("--no_compile", dest="compile", action="store_false", help="eager only (CI)")
    p.add_argument("--warm_only", action="store_true",
                   help="compile and run once, time nothing (fills torch.compile's caches for measure_baselines)")
    args = p.parse_args(argv)

    from profiler_service.harness import tasks
    todo = tasks.list_tasks(args.tasks_root, args.levels.split(","))
    if args.only:
        keep = set(args.only.split(","))
        todo = [t for t in todo if t[0] in keep]
    if args.limit:
        todo = todo[:args.limit]
    deadline = time.time() + args.deadline_s
    t_start = time.time()
    ctx = mp.get_context("spawn")
    with open(args.out, "w") as out:
        deferred = _phase(ctx, todo, args, args.workers, deadline, out, t_start, allow_defer=True)
        if deferred:
            print(f"serial phase: {len(deferred)} tasks that ran out of memory in parallel", flush=True)
            _phase(ctx, deferred, args, 1, deadline, out, t_start, allow_defer=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
