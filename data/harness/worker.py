"""The data pipeline's trusted Python worker: gathers facts that need torch or
Python's own parser and reports them; every decision is made in C++
(data/filters.cc, data/ast_similarity.cc, data/catalogue.cc).

    python3 -m data.harness.worker [--threads N]   (started by data_synth; one JSON request a line)

Requests ({"op": ...}) and their answers (proto3 JSON of data/data.proto):
  inventory  {families}                  -> Inventory: torch.nn modules, functional and torch
                                            callables with signatures; transformers candidates
  ast        {path}                      -> AstDump of the Model class, normalised
  probe      {path, device, compile_backend, atol, rtol, lock}
                                         -> ProbeFacts: eager and compiled runs, repeat and
                                            cross-input comparisons, output statistics
  time       {id, path, device, budget_s, min_samples, max_samples, lock}
                                         -> BaselineMeasurement from the profiler's own
                                            precompute.measure_task (eager only)
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

def _lock(path, shared=True):
    if not path:
        return contextlib.nullcontext()
    from profiler_service.harness.precompute import GpuLock
    lock = GpuLock(path)
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


def probe(req):
    import torch
    from profiler_service.harness import tasks
    dev, atol, rtol = req.get("device", "cpu"), float(req.get("atol", 1e-2)), float(req.get("rtol", 1e-2))
    facts = {}
    stage = "load"
    mod = None
    try:
        with _lock(req.get("lock")):
            mod = tasks.load_module(req["path"])
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
            xa, xb = inputs(101), inputs(202)
            stage = "eager"
            with torch.no_grad():
                t0 = time.perf_counter()
                ya = _first_tensor(model(*xa))
                if dev == "cuda":
                    torch.cuda.synchronize()
                facts["eager_wall_ms"] = (time.perf_counter() - t0) * 1e3
                if ya is None:
                    raise TypeError("forward returned no tensor")
                ya2 = _first_tensor(model(*xa))  # No reseed: a stochastic operator draws again.
                yb = _first_tensor(model(*xb))
            ya = ya.detach()
            facts["output_shape"] = list(ya.shape)
            facts["output_dtype"] = str(ya.dtype).replace("torch.", "")
            facts["numel"] = ya.numel()
            fa = ya.double() if ya.numel() < (1 << 24) else ya.float()
            facts["non_finite"] = bool((~torch.isfinite(fa)).any().item())
            finite = torch.nan_to_num(fa, nan=0.0, posinf=0.0, neginf=0.0)
            facts["output_abs_mean"] = finite.abs().mean().item()
            facts["output_std"] = finite.std().item() if finite.numel() > 1 else 0.0
            mean = finite.mean()
            facts["near_zero_fraction"] = (finite.abs() <= atol).float().mean().item()
            facts["near_mean_fraction"] = ((finite - mean).abs() <= atol + rtol * mean.abs()).float().mean().item()
            if ya2.shape == ya.shape:
                facts["repeat_max_abs_diff"] = (torch.nan_to_num(ya2.to(fa.dtype)) - finite).abs().max().item()
            else:
                facts["repeat_max_abs_diff"] = float("inf")
            if yb.shape == ya.shape:
                fb = torch.nan_to_num(yb.to(fa.dtype), nan=0.0, posinf=0.0, neginf=0.0)
                facts["indistinguishable_fraction"] = \
                    ((finite - fb).abs() <= atol + rtol * fb.abs()).float().mean().item()
            else:
                facts["indistinguishable_fraction"] = 0.0
            del ya2, yb, fa
            if dev == "cuda":
                torch.cuda.synchronize()
        # Outside the lock: tracing and compiling are CPU work; holding the shared
        # lock through them would stall every timer behind the slowest compile.
        # The compiled call's own GPU time may overlap a timed block of another
        # worker (one call against a median of several).
        backend = req.get("compile_backend", "")
        if backend:
            stage = "compile"
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=backend)
            with torch.no_grad():
                yc = _first_tensor(compiled(*xa))
            if yc is None or yc.shape != ya.shape:
                raise RuntimeError("compiled output shape differs from eager")
            facts["compile_max_abs_diff"] = (torch.nan_to_num(yc.to(finite.dtype)) - finite).abs().max().item()
            del yc, compiled
    except Exception as e:  # noqa: BLE001 - a failing task is a fact, not a worker failure
        facts["error_stage"] = "oom" if _is_oom(e) else stage
        facts["error"] = f"{type(e).__name__}: {e}"[:600]
    finally:
        _cleanup(mod, dev)
    return _json_safe(facts)


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
    """Eager baseline through the profiler's precompute.measure_task (same protocol as candidates)."""
    import torch
    from profiler_service.harness import backends, precompute
    dev = req.get("device", "cpu")
    if dev not in _BACKENDS:
        _BACKENDS[dev] = backends.make_backend(dev)
    args = _Args(device=dev, compile=False, budget_s=float(req.get("budget_s", 0.05)),
                                 min_samples=int(req.get("min_samples", 3)),
                                 max_samples=int(req.get("max_samples", 20)))
    try:
        rec = precompute.measure_task(req["id"], req["path"], args, _BACKENDS[dev], req.get("lock") or None)
        rec.pop("compiled", None)  # "compile disabled": computed lazily by the profiler.
    except Exception as e:  # noqa: BLE001
        rec = {"task_id": req["id"], "error": ("oom: " if _is_oom(e) else "") + f"{type(e).__name__}: {e}"[:500]}
    finally:
        _cleanup(None, dev)
    return rec


def _cleanup(mod, dev):
    import torch
    if mod is not None:
        sys.modules.pop(mod.__name__, None)
    torch._dynamo.reset()
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()


def _json_safe(d):
    out = {}
    for k, v in d.items():
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            v = 1e300 if v != v or v > 0 else -1e300
        out[k] = v
    return out


HANDLERS = {"inventory": inventory, "ast": ast_dump, "probe": probe, "time": time_task}


def main():
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # Whatever a task prints lands on stderr, never in the answers.
    sys.stdout = sys.stderr
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 0
    if threads:  # torch intra-op threads: the driver splits the machine's cores between workers.
        import torch
        torch.set_num_threads(threads)
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
