"""Kernel names a candidate's compiled artifacts can launch.

The host side of a CUDA shared object registers each kernel with its device
name as a plain string (mangled C++ or extern "C"), so identifier-like strings
of the .so are a superset of its kernel names. The profiler classifies a
recorded kernel as the candidate's when its name is in this set; the sandbox
builds the artifact itself, so the set cannot name a library kernel unless
the candidate's source spells that exact symbol (residual risk, see
docs/PROFILER.md)."""
import re

_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]{3,}")


def kernel_symbols(paths, limit=200000):
    out = set()
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        for m in _IDENT.finditer(data):
            out.add(m.group().decode())
            if len(out) >= limit:
                break
    return sorted(out)
