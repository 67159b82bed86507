"""How steady is the torch.compile baseline? Inductor gives a reduction
several Triton configs and benchmarks them at the compiled model's first call,
keeping the winner in its cache dir (`*.best_config`); a baseline measured
later with that cache replays the winner. This bench compiles one task in N
fresh cache dirs at once (as the baselines' warm-up compiles, N workers on one
GPU), once with inductor's local autotune cache on (the winner is chosen while
the other N-1 compile and benchmark beside it) and once off (nothing chosen
there; each dir's winner is chosen at its first timed process, alone on the
GPU). Then, one process at a time on a quiet GPU, it times each dir's compiled
forward (CUDA-graph replays, fresh random inputs) and reads the winners the dir
keeps (none in the second arm: the code compiled there says to keep none).

    python3 tests/bench/compile_pick_bench.py TASK.py [TASK.py ...] [--n=8]   (GPU machine)

Prints per task and arm the forward's microseconds (p50 of each dir) and the
distinct winners; a JSON line per task last."""
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def child(mode, task, cache, local_cache):
    import torch
    import torch._inductor.config as ic
    if not hasattr(ic, "autotune_local_cache"):
        raise SystemExit("this torch has no inductor autotune_local_cache")
    ic.autotune_local_cache = local_cache == "1"
    import importlib.util
    spec = importlib.util.spec_from_file_location("task", task)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(1234)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    compiled = torch.compile(model)
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    with torch.no_grad():
        compiled(*xs)  # compiles, and benchmarks the configs unless a winner is cached
        torch.cuda.synchronize()
        if mode == "warm":
            return
        for _ in range(3):
            compiled(*xs)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            g = torch.cuda.CUDAGraph()
            reps = 20
            with torch.cuda.graph(g):
                for _ in range(reps):
                    compiled(*xs)
        g.replay()
        torch.cuda.synchronize()
        per = []
        for _ in range(15):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            per.append(a.elapsed_time(b) * 1e3 / reps)
    print(json.dumps({"us": statistics.median(per)}))


def winners(cache):
    out = []
    for f in sorted(glob.glob(os.path.join(cache, "**", "*.best_config"), recursive=True)):
        try:
            c = json.load(open(f))
        except ValueError:
            continue
        out.append(",".join(f"{k}={c[k]}" for k in sorted(c) if k[:1].isupper() or k == "num_warps"))
    return "; ".join(out) or "-"


def run_child(mode, task, cache, local_cache):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_COMPILE_THREADS="1")
    return subprocess.Popen([sys.executable, __file__, "--child", mode, task, cache, local_cache], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def arm(task, n, local_cache, root):
    caches = [os.path.join(root, f"{local_cache}-{i}") for i in range(n)]
    warm = [run_child("warm", task, c, local_cache) for c in caches]  # N at once
    for p in warm:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"warm-up compile failed: {err[-2000:]}")
    rows = []
    for c in caches:  # one at a time; with the local cache on now, a winner chosen here is kept
        p = run_child("time", task, c, "1")
        out, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"timing failed: {err[-2000:]}")
        rows.append((json.loads(out.strip().splitlines()[-1])["us"], winners(c)))
    return rows


def main():
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:6])
        return
    n = 8
    tasks = []
    for a in sys.argv[1:]:
        if a.startswith("--n="):
            n = int(a[4:])
        else:
            tasks.append(a)
    for task in tasks:
        name = os.path.basename(task)[:-3]
        root = tempfile.mkdtemp(prefix="compile_pick_")
        rec = {"task": name, "n": n}
        for label, local_cache in (("contended", "1"), ("quiet", "0")):
            rows = arm(task, n, local_cache, root)
            us = [r[0] for r in rows]
            rec[label] = {"us": [round(u, 2) for u in us], "winners": sorted(set(r[1] for r in rows))}
            print(f"{name} {label:9s}: us p50 {statistics.median(us):.2f} min {min(us):.2f} max {max(us):.2f} "
                  f"(max/min {max(us) / min(us):.2f}); {len(rec[label]['winners'])} distinct winner sets", flush=True)
            for w in rec[label]["winners"]:
                print(f"    {w}")
        shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
