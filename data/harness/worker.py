"""The data pipeline's trusted Python worker: gathers facts that need torch or
Python's own parser and reports them; every decision is made in C++
(data/filters.cc, data/ast_similarity.cc, data/catalogue.cc).

    python3 -m data.harness.worker [--threads N]   (started by data_synth; one JSON request a line)

Requests ({"op": ...}) and their answers (proto3 JSON of data/data.proto):
  inventory  {families}                  -> Inventory: torch.nn modules, functional and torch
                                            callables with signatures; transformers candidates
  ast        {path}                      -> AstDump of the Model class, normalised
  probe      {path, device, compile_backend, atol, rtol, lock, memory_limit_bytes, defer_compile}
                                         -> ProbeFacts: eager and compiled runs, repeat and
                                            cross-input comparisons, output statistics, peak
                                            memory, where the time went
  compile    {path, drop}                -> ProbeFacts (compile fields): completes a probe sent
                                            with defer_compile (drop: releases it)
  time       {id, path, device, budget_s, min_samples, max_samples, lock, memory_limit_bytes}
                                         -> BaselineMeasurement from the profiler's own
                                            precompute.measure_task (eager only), with the
                                            TimingDiagnostics fields beside it
The answer goes to the original stdout; anything else the task prints goes to stderr.
"""
import ast
import contextlib
import gc
import importlib
import inspect
import json
import os
import sys
import time
import traceback
import types


def _params(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append({"name": p.name, "has_default": p.default is not p.empty})
    return out


def _symbol(name, fn):
    ps = _params(fn)
    return {"name": name, "params": ps or [], "signature_known": ps is not None}


def inventory(req):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    out = {"torch_version": torch.__version__, "symbols": [], "nn_modules": []}
    for n, v in sorted(vars(nn).items()):
        if isinstance(v, type) and issubclass(v, nn.Module) and not n.startswith("_"):
            out["nn_modules"].append(n)
            out["symbols"].append(_symbol("nn." + n, v.__init__))
    out["symbols"].append(_symbol("nn.Parameter", nn.Parameter))
    fnames = [n for n in dir(F) if not n.startswith("_") and callable(getattr(F, n))]
    out["functional_count"] = len(fnames)
    for n in fnames:
        out["symbols"].append(_symbol("F." + n, getattr(F, n)))
    for space, prefix in ((torch, "torch."), (torch.special, "torch.special.")):
        for n in dir(space):
            v = getattr(space, n, None)
            if not n.startswith("_") and callable(v) and not isinstance(v, type):
                out["symbols"].append(_symbol(prefix + n, v))
    try:
        import transformers
        out["transformers_version"] = transformers.__version__
    except ImportError:
        return out
    out["transformers"] = []
    for fam in req.get("families", []):
        out["transformers"] += _transformers_family(fam)
    return out


def _transformers_family(fam):
    import torch.nn as nn
    try:
        modeling = importlib.import_module(f"transformers.models.{fam}.modeling_{fam}")
        configuration = importlib.import_module(f"transformers.models.{fam}.configuration_{fam}")
    except Exception as e:  # noqa: BLE001 - a family missing from this version is reported, not fatal
        print(f"worker: transformers family {fam}: {type(e).__name__}: {e}", file=sys.stderr)
        return []
    configs = [n for n, v in vars(configuration).items()
               if isinstance(v, type) and n.endswith("Config") and v.__module__ == configuration.__name__]
    config_class = f"{configuration.__name__}.{configs[0]}" if configs else ""
    found = []
    for n, v in sorted(vars(modeling).items()):
        if not (isinstance(v, type) and issubclass(v, nn.Module) and v.__module__ == modeling.__name__):
            continue
        if "PreTrained" in n or n.endswith("Model") or "For" in n:
            continue
        init, fwd = _params(v.__init__), _params(v.forward)
        if init is None or fwd is None:
            continue
        found.append({"family": fam, "module_path": modeling.__name__, "class_name": n,
                      "config_class": config_class, "init_params": init, "forward_params": fwd})
    return found


# --- AST: the Model class with names, constants and docstrings normalised.

_KEPT_NAMES = {"torch", "nn", "F", "self", "super", "math", "Model", "isinstance", "tuple", "list"}


def _label(node):
    t = type(node).__name__
    if isinstance(node, ast.Name):
        return "Name:" + (node.id if node.id in _KEPT_NAMES else "_")
    if isinstance(node, ast.Attribute):
        owner = node.value
        return "Attribute:" + ("_" if isinstance(owner, ast.Name) and owner.id == "self" else node.attr)
    if isinstance(node, ast.Constant):
        return "Constant:" + type(node.value).__name__
    if isinstance(node, ast.keyword):
        return "keyword:" + (node.arg or "**")
    if isinstance(node, ast.FunctionDef):
        return "FunctionDef:" + (node.name if node.name in ("__init__", "forward") else "_")
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare)):
        ops = node.ops if isinstance(node, ast.Compare) else [node.op]
        return t + ":" + ",".join(type(o).__name__ for o in ops)
    if isinstance(node, ast.AugAssign):
        return t + ":" + type(node.op).__name__
    return t


def _children(node):
    for name, value in ast.iter_fields(node):
        if name in ("ctx", "op", "ops", "returns", "annotation", "type_comment", "decorator_list"):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super" \
                and name in ("args", "keywords"):
            continue  # super(Model, self) and super() are the same call.
        items = value if isinstance(value, list) else [value]
        for i, child in enumerate(items):
            if not isinstance(child, ast.AST):
                continue
            if name == "body" and i == 0 and isinstance(child, ast.Expr) and \
                    isinstance(child.value, ast.Constant) and isinstance(child.value.value, str):
                continue  # Docstring.
            yield child


def ast_dump(req):
    src = open(req["path"]).read()
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        return {"error": f"SyntaxError: {e}"}
    root = tree
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            root = node
            break
    labels, arity = [], []

    def walk(node):
        labels.append(_label(node))
        slot = len(arity)
        arity.append(0)
        n = 0
        for child in _children(node):
            walk(child)
            n += 1
        arity[slot] = n

    walk(root)
    return {"labels": labels, "arity": arity}


# --- Execution facts.

class _TimedLock:
    """The profiler's GpuLock, with the seconds spent waiting for it counted
    (the report's "Where the time goes"); measure_task builds its own, so
    precompute.GpuLock is this class in the worker (set in main)."""
    waits = {"shared": 0.0, "exclusive": 0.0, "held_exclusive": 0.0}
    base = None

    def __init__(self, path):
        if _TimedLock.base is None:  # Imported, not started by main().
            from profiler_service.harness import precompute
            _TimedLock.base = precompute.GpuLock
        self._lock = _TimedLock.base(path)

    @contextlib.contextmanager
    def _timed(self, cm, kind):
        t0 = time.perf_counter()
        with cm:
            t1 = time.perf_counter()
            _TimedLock.waits[kind] += t1 - t0
            try:
                yield
            finally:
                if kind == "exclusive":
                    _TimedLock.waits["held_exclusive"] += time.perf_counter() - t1

    def shared(self):
        return self._timed(self._lock.shared(), "shared")

    def exclusive(self):
        return self._timed(self._lock.exclusive(), "exclusive")


def _lock(path, shared=True):
    if not path:
        return contextlib.nullcontext()
    lock = _TimedLock(path)
    return lock.shared() if shared else lock.exclusive()


def _first_tensor(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def _is_oom(e):
    return isinstance(e, MemoryError) or "out of memory" in str(e).lower()


class _MemoryCap:
    """The memory one request may use: the driver grants each candidate a share
    of the GPU (data/memory_budget.h), so a task is only ever short of memory
    because of itself, never because of the other workers.
    cuda: the caching allocator's per-process limit (what this worker already
    holds, e.g. the timing backend's flush and anchor buffers, plus the
    grant); the peak is max_memory_reserved. cpu: no allocator limit exists, so
    the peak resident-set growth (VmHWM after /proc/self/clear_refs) is
    checked against the grant at check() and reported, which lets the
    escalation be tested without a GPU."""

    def __init__(self, dev, limit):
        import torch
        self.dev, self.limit, self.base = dev, int(limit or 0), 0
        self.cpu_hwm = False
        if dev == "cuda":
            total = torch.cuda.get_device_properties(0).total_memory
            self.base = torch.cuda.memory_reserved()
            frac = 1.0 if not self.limit else min(1.0, (self.base + self.limit) / total)
            try:
                torch.cuda.set_per_process_memory_fraction(float(frac))
                torch.cuda.reset_peak_memory_stats()
            except Exception as e:  # noqa: BLE001 - uncapped is the old behaviour, not a failed task
                print(f"worker: memory cap not set: {type(e).__name__}: {e}", file=sys.stderr)
        else:
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # Resets VmHWM to the current resident set.
                self.base = _proc_kb("VmRSS") * 1024
                self.cpu_hwm = True
            except OSError:
                pass

    def peak(self):
        import torch
        if self.dev == "cuda":
            return max(0, torch.cuda.max_memory_reserved() - self.base)
        return max(0, _proc_kb("VmHWM") * 1024 - self.base) if self.cpu_hwm else 0

    def check(self):
        if self.dev != "cuda" and self.limit and self.peak() > self.limit:
            raise MemoryError(f"out of memory: peak {self.peak() >> 20} MiB above the grant of "
                              f"{self.limit >> 20} MiB (cpu: resident-set growth)")


def _proc_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


# Outputs are reduced in chunks: the checks' temporaries stay a few MB however
# large the output (the probe's memory is the task's, see _MemoryCap).
_CHUNK = 1 << 22


def _chunks(*ts):
    flats = [t.reshape(-1) for t in ts]
    for i in range(0, flats[0].numel(), _CHUNK):
        yield [_finite(f[i:i + _CHUNK]) for f in flats]


def _finite(t):
    import torch
    return torch.nan_to_num(t.double(), nan=0.0, posinf=0.0, neginf=0.0)


def _max_abs_diff(y, ref):
    """max |y - ref| over finite-mapped values (NaN/Inf read as 0); inf if the shapes differ."""
    import torch
    if y.shape != ref.shape:
        return float("inf")
    m = torch.zeros((), dtype=torch.float64, device=ref.device)
    for a, b in _chunks(y, ref):
        m = torch.maximum(m, (a - b).abs().max())
    return m.item()


def _output_facts(ya, atol, rtol, facts):
    import torch
    n = ya.numel()
    z = lambda: torch.zeros((), dtype=torch.float64, device=ya.device)  # noqa: E731
    bad, total, total_abs, near_zero = z(), z(), z(), z()
    for c in ya.reshape(-1).split(_CHUNK):  # Raw values: _chunks maps NaN/Inf to 0.
        bad += (~torch.isfinite(c)).sum()
    for (c,) in _chunks(ya):
        total += c.sum()
        total_abs += c.abs().sum()
        near_zero += (c.abs() <= atol).sum()
    mean = total / max(n, 1)
    sq, near_mean = z(), z()
    for (c,) in _chunks(ya):
        d = c - mean
        sq += (d * d).sum()
        near_mean += (d.abs() <= atol + rtol * mean.abs()).sum()
    facts["non_finite"] = bool(bad.item() > 0)
    facts["output_abs_mean"] = (total_abs / max(n, 1)).item()
    facts["output_std"] = (sq / (n - 1)).sqrt().item() if n > 1 else 0.0
    facts["near_zero_fraction"] = (near_zero / max(n, 1)).item()
    facts["near_mean_fraction"] = (near_mean / max(n, 1)).item()


def _indistinguishable(ya, yb, atol, rtol):
    import torch
    if yb.shape != ya.shape:
        return 0.0
    close = torch.zeros((), dtype=torch.float64, device=ya.device)
    for a, b in _chunks(ya, yb):
        close += ((a - b).abs() <= atol + rtol * b.abs()).sum()
    return (close / max(ya.numel(), 1)).item()


# A probe whose compile check the driver asked to defer (it judges the eager
# facts first and only compiles a task they did not reject): model, reference
# output and input maker, held until the "compile" request or the next probe.
_KEPT = {}


def probe(req):
    """Eager facts (under the shared GPU lock), then torch.compile's (outside
    it), unless defer_compile: then the "compile" request completes the probe."""
    import torch
    from profiler_service.harness import tasks
    _drop_kept()
    dev, atol, rtol = req.get("device", "cpu"), float(req.get("atol", 1e-2)), float(req.get("rtol", 1e-2))
    facts = {}
    stage = "load"
    mod = None
    kept = False
    cap = _MemoryCap(dev, req.get("memory_limit_bytes", 0))
    facts["memory_limit_bytes"] = cap.limit
    t0 = time.perf_counter()
    waited = _TimedLock.waits["shared"]
    try:
        mod = tasks.load_module(req["path"])  # Python only (a transformers import can take seconds): no lock.
        with _lock(req.get("lock")):
            t_in = time.perf_counter()
            stage = "init"
            torch.manual_seed(1234)
            with torch.device(dev):
                model = mod.Model(*mod.get_init_inputs())
            model = model.to(dev).eval()  # As the sandbox and the profiler build it.

            def inputs(seed):
                torch.manual_seed(seed)
                with torch.device(dev):
                    raw = mod.get_inputs()
                return [x.to(dev) if isinstance(x, torch.Tensor) else x for x in raw]

            stage = "inputs"
            xa = inputs(101)
            stage = "eager"
            with torch.no_grad():
                t1 = time.perf_counter()
                ya = _first_tensor(model(*xa))
                if dev == "cuda":
                    torch.cuda.synchronize()
                facts["eager_wall_ms"] = (time.perf_counter() - t1) * 1e3
                if ya is None:
                    raise TypeError("forward returned no tensor")
                ya = ya.detach()
                # One output alive next to ya at a time; the inputs of b made after a's are gone.
                ya2 = _first_tensor(model(*xa))  # No reseed: a stochastic operator draws again.
                facts["repeat_max_abs_diff"] = _max_abs_diff(ya2, ya)
                del ya2, xa
                cap.check()
                xb = inputs(202)
                yb = _first_tensor(model(*xb))
                del xb
                facts["indistinguishable_fraction"] = _indistinguishable(ya, yb, atol, rtol)
                del yb
            facts["output_shape"] = list(ya.shape)
            facts["output_dtype"] = str(ya.dtype).replace("torch.", "")
            facts["numel"] = ya.numel()
            _output_facts(ya, atol, rtol, facts)
            if dev == "cuda":
                torch.cuda.synchronize()
            cap.check()
            facts["eager_s"] = time.perf_counter() - t_in
        backend = req.get("compile_backend", "")
        if backend:
            state = {"model": model, "ya": ya, "inputs": inputs, "mod": mod, "dev": dev, "cap": cap,
                     "backend": backend}
            if req.get("defer_compile"):
                _KEPT.update(state)
                kept = True
            else:
                stage = "compile"
                facts.update(_compile_facts(state))
    except Exception as e:  # noqa: BLE001 - a failing task is a fact, not a worker failure
        facts["error_stage"] = "oom" if _is_oom(e) else stage
        facts["error"] = f"{type(e).__name__}: {e}"[:600]
    finally:
        facts["lock_wait_s"] = _TimedLock.waits["shared"] - waited
        facts["probe_s"] = time.perf_counter() - t0
        facts["peak_bytes"] = cap.peak()
        if not kept:
            _cleanup(mod, dev)
    return _json_safe(facts)


def _compile_facts(state):
    """Outside the GPU lock: tracing and compiling are CPU work; holding the
    shared lock through them would stall every timer behind the slowest
    compile. The compiled call's own GPU time may overlap a timed block of
    another worker (one call against a median of several)."""
    import torch
    facts = {}
    t0 = time.perf_counter()
    try:
        torch._dynamo.reset()
        compiled = torch.compile(state["model"], backend=state["backend"])
        xa = state["inputs"](101)  # The same inputs as the eager reference (same seed).
        with torch.no_grad():
            yc = _first_tensor(compiled(*xa))
        del xa
        if yc is None or yc.shape != state["ya"].shape:
            raise RuntimeError("compiled output shape differs from eager")
        facts["compile_max_abs_diff"] = _max_abs_diff(yc, state["ya"])
        del yc, compiled
        state["cap"].check()
    except Exception as e:  # noqa: BLE001
        facts["error_stage"] = "oom" if _is_oom(e) else "compile"
        facts["error"] = f"{type(e).__name__}: {e}"[:600]
    facts["compile_s"] = time.perf_counter() - t0
    return facts


def compile_check(req):
    """Completes a deferred probe (same path), or with drop only releases it."""
    if req.get("drop") or _KEPT.get("mod") is None:
        missing = _KEPT.get("mod") is None and not req.get("drop")
        _drop_kept()
        return {"error": "worker: no deferred probe to compile"} if missing else {}
    state = dict(_KEPT)
    _KEPT.clear()
    try:
        if os.path.realpath(state["mod"].__file__) != os.path.realpath(req["path"]):
            return {"error": f"worker: the deferred probe is {state['mod'].__file__}, not {req['path']}"}
        facts = _compile_facts(state)
        facts["peak_bytes"] = state["cap"].peak()
        return _json_safe(facts)
    finally:
        mod, dev = state["mod"], state["dev"]
        state.clear()
        _cleanup(mod, dev)


def _drop_kept():
    if _KEPT:
        mod, dev = _KEPT.get("mod"), _KEPT.get("dev", "cpu")
        _KEPT.clear()
        _cleanup(mod, dev)


_BACKENDS = {}

# measure_task reads its command-line namespace; these are precompute's own
# defaults for what this adapter does not set (the harness is being reworked:
# an attribute it gains later falls back here or fails loudly).
_PRECOMPUTE_DEFAULTS = {"target_rse": 0.01, "flush_multiple": 2.0, "threads": 0, "compile": False}


class _Args(types.SimpleNamespace):
    def __getattr__(self, name):
        if name in _PRECOMPUTE_DEFAULTS:
            return _PRECOMPUTE_DEFAULTS[name]
        raise AttributeError(f"data worker: precompute.measure_task wants args.{name}; add it to "
                             f"_PRECOMPUTE_DEFAULTS")


def time_task(req):
    """Eager baseline through the profiler's precompute.measure_task (same
    protocol as candidates), within the request's memory grant. Next to the
    BaselineMeasurement fields: lock_wait_s (both locks), exclusive_s (the
    timed section, GPU held alone) and peak_bytes."""
    import torch
    from profiler_service.harness import backends, precompute
    dev = req.get("device", "cpu")
    if dev not in _BACKENDS:
        with _lock(req.get("lock")):
            _BACKENDS[dev] = backends.make_backend(dev)
            # Its buffers written now (the cache flush, sized by the last-level
            # cache: 2 x 480 MiB on some hosts; the anchor's copy): the worker's
            # own memory, outside every grant.
            _BACKENDS[dev].prepare()
            _BACKENDS[dev].anchor()
    args = _Args(device=dev, compile=False, budget_s=float(req.get("budget_s", 0.05)),
                 min_samples=int(req.get("min_samples", 3)), max_samples=int(req.get("max_samples", 20)))
    w0 = dict(_TimedLock.waits)
    cap = _MemoryCap(dev, req.get("memory_limit_bytes", 0))
    try:
        rec = precompute.measure_task(req["id"], req["path"], args, _BACKENDS[dev], req.get("lock") or None)
        rec.pop("compiled", None)  # "compile disabled": computed lazily by the profiler.
        cap.check()
    except Exception as e:  # noqa: BLE001
        rec = {"task_id": req["id"], "error": ("oom: " if _is_oom(e) else "") + f"{type(e).__name__}: {e}"[:500]}
    finally:
        rec["peak_bytes"] = cap.peak()
        _cleanup(None, dev)
    w = _TimedLock.waits
    rec["lock_wait_s"] = w["shared"] + w["exclusive"] - w0["shared"] - w0["exclusive"]
    rec["exclusive_s"] = w["held_exclusive"] - w0["held_exclusive"]
    return rec


def _cleanup(mod, dev):
    import torch
    if mod is not None:
        sys.modules.pop(mod.__name__, None)
    torch._dynamo.reset()
    # A task module is a reference cycle: collected here. What survives is the
    # worker's own (imports, caches): frozen, so the next collections skip it.
    gc.collect()
    gc.freeze()
    if dev == "cuda":
        torch.cuda.empty_cache()


def _json_safe(d):
    out = {}
    for k, v in d.items():
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            v = 1e300 if v != v or v > 0 else -1e300
        out[k] = v
    return out


HANDLERS = {"inventory": inventory, "ast": ast_dump, "probe": probe, "compile": compile_check, "time": time_task}


def main():
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # Whatever a task prints lands on stderr, never in the answers.
    sys.stdout = sys.stderr
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 0
    import torch
    import torch._dynamo  # noqa: F401 - imported now, so the freeze below covers it
    from profiler_service.harness import backends, precompute, protocol, tasks  # noqa: F401
    _TimedLock.base = precompute.GpuLock
    precompute.GpuLock = _TimedLock  # measure_task's locks report their waits too.
    if threads:  # torch intra-op threads: the driver splits the machine's cores between workers.
        torch.set_num_threads(threads)
    # Every request ends in gc.collect() (a task module is a reference cycle);
    # with torch's start-up heap frozen it scans only what requests created.
    gc.collect()
    gc.freeze()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            resp = HANDLERS[req["op"]](req)
        except Exception as e:  # noqa: BLE001 - the driver decides what a failed request means
            resp = {"error": f"worker: {type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        reply.write(json.dumps(resp) + "\n")
        reply.flush()


if __name__ == "__main__":
    main()
