"""ctypes binding of the CUPTI recorder (profiler_service/cupti/kprof.h).

The library is normally already in the process: the harness is started with
CUDA_INJECTION64_PATH=<libkprof.so>, and dlopen of the same path returns the
loaded instance. Without it (CPU backend, a host with no CUPTI) `load()`
returns None and timing falls back to CUDA events, flagged "cupti_inactive".
"""
import ctypes
import json
import os

TAG_WARMUP, TAG_ANCHOR, TAG_TIMED = 0, 1, 2  # timed callable i uses TAG_TIMED + i


class WindowResult(ctypes.Structure):
    _fields_ = [("sum_us", ctypes.c_double), ("busy_us", ctypes.c_double),
                ("span_us", ctypes.c_double), ("activities", ctypes.c_int32),
                ("kernels", ctypes.c_int32), ("streams", ctypes.c_int32),
                ("foreign_threads", ctypes.c_int32)]


class Kprof:
    def __init__(self, lib):
        self._lib = lib
        lib.kprof_last_error.restype = ctypes.c_char_p
        lib.kprof_take_report.restype = ctypes.c_long
        lib.kprof_take_report.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.kprof_stream_id.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(ctypes.c_uint32)]
        lib.kprof_gettid.restype = ctypes.c_uint64

    def _check(self, rc, what):
        if rc < 0:
            raise RuntimeError(f"kprof {what}: {self._lib.kprof_last_error().decode()}")
        return rc

    def begin(self, tag):
        return self._check(self._lib.kprof_window_begin(tag), "window_begin")

    def end(self):
        r = WindowResult()
        self._check(self._lib.kprof_window_end(ctypes.byref(r)), "window_end")
        return r

    def take_report(self):
        cap = 1 << 20
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = self._lib.kprof_take_report(buf, cap)
            if n >= 0:
                return json.loads(buf.value.decode())
            cap = -n + 1

    def stream_id(self, cu_stream, per_thread=False):
        out = ctypes.c_uint32()
        self._check(self._lib.kprof_stream_id(cu_stream, int(per_thread), ctypes.byref(out)), "stream_id")
        return out.value

    def default_stream_ids(self):
        """CUPTI's ids of this thread's default streams: the per-thread one
        (where the executor's torch ops and the candidate's launches go) and
        the legacy one (the harness's own helper kernels), each asked for in
        the ways CUPTI names it; a form it refuses is left out."""
        ids = []
        for handle, per_thread in ((2, True), (0, True), (2, False), (0, False)):
            try:
                sid = self.stream_id(handle, per_thread)
            except RuntimeError:
                continue
            if sid not in ids:
                ids.append(sid)
        return ids

    def reset_persisting_l2(self):
        self._check(self._lib.kprof_reset_persisting_l2(), "reset_persisting_l2")

    def gettid(self):
        return int(self._lib.kprof_gettid())


def load(path=None):
    """The recorder if its library is injected (or at `path`) and active, else None."""
    path = path or os.environ.get("KERNELRL_KPROF_LIB") or os.environ.get("CUDA_INJECTION64_PATH")
    if not path or not os.path.exists(path):
        return None
    lib = ctypes.CDLL(path)
    if lib.kprof_init() != 0:
        raise RuntimeError("kprof_init: " + ctypes.c_char_p(lib.kprof_last_error()).value.decode())
    return Kprof(lib)
