"""KernelBench task files: loading and the keys of the baseline cache."""
import hashlib
import importlib.util
import os
import sys

INPUT_POLICY_VERSION = "get_inputs-v6"  # profiler_service/task_key.h says what changed


def load_module(path, name=None):
    name = name or "kb_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def input_policy_text(device="cuda", dtype=""):
    """Canonical text of what decides the timed inputs (hashed into the key)."""
    return f"generator={INPUT_POLICY_VERSION};device={device};dtype={dtype or 'task'}"


def input_policy_hash(device="cuda", dtype="", tf32=False):
    """Short readable id of the input policy (the cache key component); the C++
    InputPolicyHash (profiler_service/task_key.cc) builds the same string; BaselineKeyFor appends ".tf32"."""
    return f"{INPUT_POLICY_VERSION}.{device}.{dtype or 'task'}" + (".tf32" if tf32 else "")


def task_hash(source, device="cuda", dtype=""):
    """sha256 of the reference source plus the input policy (Task.content_hash)."""
    h = hashlib.sha256(source.encode())
    h.update(b"\0" + input_policy_text(device, dtype).encode())
    return h.hexdigest()


def list_tasks(root, levels=("level1", "level2")):
    out = []
    for level in levels:
        d = os.path.join(root, level)
        if not os.path.isdir(d):
            continue
        files = [f for f in os.listdir(d) if f.endswith(".py")]
        files.sort(key=lambda f: (int(f.split("_")[0]) if f.split("_")[0].isdigit() else 1 << 30, f))
        out += [(f"{level}/{f[:-3]}", os.path.join(d, f)) for f in files]
    return out
