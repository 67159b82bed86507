"""The module a candidate's model_new.py imports to call its own kernels on
the fast path (no torch headers in the kernels; see sandbox/SKILL.md):

    import kernelrl
    lib = kernelrl.load_kernels()          # the workspace's compiled kernels/*.cu
    lib.relu_forward(x, y, x.numel())      # extern "C" int relu_forward(const float*, float*, long long)

Arguments: a tensor passes its data pointer, a Python int passes int64, a
Python float passes float32, kernelrl.f64(v)/kernelrl.i32(v) pass double/int32.
A launcher returns an int (cudaError_t or 0); non-zero raises KernelError.
Kernels launch on the default stream, compiled per-thread (nvcc
--default-stream per-thread): the executor thread's own stream, which the
harness makes torch's current stream too (candidate.py)."""
import ctypes
import os

import torch

_LIBRARY = None
_LIBRARY_PATH = os.environ.get("KERNELRL_KERNELS_SO", "")


class KernelError(RuntimeError):
    pass


class f64(float):
    pass


class i32(int):
    pass


def _convert(a):
    if isinstance(a, torch.Tensor):
        return ctypes.c_void_p(a.data_ptr())
    if isinstance(a, bool):
        return ctypes.c_int(int(a))
    if isinstance(a, i32):
        return ctypes.c_int32(int(a))
    if isinstance(a, int):
        return ctypes.c_int64(a)
    if isinstance(a, f64):
        return ctypes.c_double(float(a))
    if isinstance(a, float):
        return ctypes.c_float(a)
    raise TypeError(f"kernel argument of type {type(a).__name__} is not supported")


class _Launcher:
    __slots__ = ("name", "fn")

    def __init__(self, name, fn):
        self.name = name
        self.fn = fn

    def __call__(self, *args):
        rc = self.fn(*[_convert(a) for a in args])
        if rc != 0:
            raise KernelError(f"{self.name} returned error {rc}")


class KernelLibrary:
    def __init__(self, path):
        self._lib = ctypes.CDLL(path)
        self._cache = {}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._cache:
            fn = getattr(self._lib, name)
            fn.restype = ctypes.c_int
            self._cache[name] = _Launcher(name, fn)
        return self._cache[name]


def _set_library_path(path):
    """Called by the trusted harness before the candidate is imported."""
    global _LIBRARY_PATH, _LIBRARY
    _LIBRARY_PATH = path
    _LIBRARY = KernelLibrary(path) if path else None


def load_kernels():
    global _LIBRARY
    if _LIBRARY is None:
        if not _LIBRARY_PATH:
            raise KernelError("no compiled kernels: this workspace has no kernels/*.cu (or *.cc)")
        _LIBRARY = KernelLibrary(_LIBRARY_PATH)
    return _LIBRARY
