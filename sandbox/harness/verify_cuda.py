"""ctypes face of the trusted harness's CUDA helpers (cuda/verify_cuda.cu):
one-pass digests and tolerance checks, and the GPU output exchange. Loaded
in the reference and candidate processes (after CUDA init), never in the
zygote. Without the library (CPU workers, CI) every caller keeps its torch
path; `available()` says which one runs."""
import ctypes
import os
import socket

import torch

_LIB = None
_ERROR = "not loaded"

# dtype -> krv_compare kind: tolerance kinds for floating dtypes, exact
# unit-by-unit comparison (unit = element size) for everything else.
_TOLERANCE = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}


class VerifyCudaError(RuntimeError):
    pass


def load(path):
    """Loads the library once per process; returns "" or why not."""
    global _LIB, _ERROR
    if _LIB is not None or not path:
        return "" if _LIB is not None else "no verify_cuda library configured"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        _ERROR = f"cannot load {path}: {e}"
        return _ERROR
    u64p = ctypes.POINTER(ctypes.c_ulonglong)
    lib.krv_digest.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, u64p]
    lib.krv_compare.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int,
                                ctypes.c_double, ctypes.c_double, u64p]
    lib.krv_fill.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_int]
    lib.krv_copy.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_ulonglong]
    lib.krv_xor_keystream.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_ulonglong]
    lib.krv_exchange_create.argtypes = [ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_int), u64p, u64p]
    lib.krv_exchange_import.argtypes = [ctypes.c_int, ctypes.c_ulonglong, u64p]
    lib.krv_exchange_release.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    lib.krv_error_string.restype = ctypes.c_char_p
    lib.krv_error_string.argtypes = [ctypes.c_int]
    _LIB, _ERROR = lib, ""
    return ""


def available():
    return _LIB is not None


def error():
    return _ERROR


def _check(rc, what):
    if rc != 0:
        raise VerifyCudaError(f"{what}: {_LIB.krv_error_string(rc).decode(errors='replace')} ({rc})")


def digest_units(t, unit_size):
    """(plain, weighted) of a contiguous CUDA tensor's bytes read as units of
    unit_size bytes, exactly as inputs.fingerprint defines them."""
    out = (ctypes.c_ulonglong * 2)()
    _check(_LIB.krv_digest(t.data_ptr(), t.nbytes // unit_size, unit_size, out), "krv_digest")
    return int(out[0]), int(out[1])


def xor_keystream(t, key):
    """XORs a contiguous CUDA uint8 tensor (a multiple of 8 bytes) in place with
    splitmix64(key + i), asynchronously on the default stream."""
    _check(_LIB.krv_xor_keystream(t.data_ptr(), t.numel() // 8, key & (2 ** 64 - 1)), "krv_xor_keystream")


def count_mismatches(got, ref, atol, rtol):
    """(not_close, new_nan, first_not_close, first_new_nan) of two contiguous
    CUDA tensors of one dtype and size: torch.isclose(equal_nan=True) in
    double for floating dtypes, exact equality otherwise."""
    kind = _TOLERANCE.get(ref.dtype)
    n = ref.numel()
    if kind is None:
        unit = ref.element_size() if ref.element_size() in (1, 2, 4, 8) else 1
        kind, n = 10 + unit, ref.nbytes // unit
    out = (ctypes.c_ulonglong * 4)()
    _check(_LIB.krv_compare(got.data_ptr(), ref.data_ptr(), n, kind, float(atol), float(rtol), out), "krv_compare")
    if kind >= 10 and ref.element_size() not in (1, 2, 4, 8):
        return int(out[0]), 0, int(out[2]) // ref.element_size(), ref.numel()
    return int(out[0]), int(out[1]), int(out[2]), int(out[3])


class _Device:
    """Raw device memory as a torch tensor (no copy, no ownership)."""

    def __init__(self, ptr, shape, dtype):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": _TYPESTR[dtype], "data": (ptr, False),
                                         "version": 2}


_TYPESTR = {torch.float32: "<f4", torch.float64: "<f8", torch.float16: "<f2", torch.uint8: "|u1",
            torch.int8: "|i1", torch.int16: "<i2", torch.int32: "<i4", torch.int64: "<i8", torch.bool: "|b1"}


def view(ptr, numel, dtype):
    """A flat tensor over device memory at ptr; dtypes numpy cannot name
    (bfloat16, complex...) are viewed through bytes."""
    if dtype in _TYPESTR:
        return torch.as_tensor(_Device(ptr, (numel,), dtype), device="cuda")
    size = torch.empty((), dtype=dtype).element_size()
    return torch.as_tensor(_Device(ptr, (numel * size,), torch.uint8), device="cuda").view(dtype)


class Exchange:
    """One exportable device allocation the reference owns and the candidate
    maps (fd over a unix socket). Slots are poisoned (0xFF) whenever the
    reference is not waiting for the candidate to fill them."""

    ALIGN = 512

    def __init__(self, ptr, nbytes, fd=-1):
        self.ptr, self.nbytes, self.fd = ptr, nbytes, fd

    @classmethod
    def create(cls, nbytes):
        fd, ptr, mapped = ctypes.c_int(-1), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
        _check(_LIB.krv_exchange_create(max(1, nbytes), ctypes.byref(fd), ctypes.byref(ptr), ctypes.byref(mapped)),
               "krv_exchange_create")
        ex = cls(ptr.value, mapped.value, fd.value)
        ex.fill(0, ex.nbytes)
        return ex

    @classmethod
    def import_fd(cls, fd, nbytes):
        ptr = ctypes.c_ulonglong(0)
        try:
            _check(_LIB.krv_exchange_import(fd, nbytes, ctypes.byref(ptr)), "krv_exchange_import")
        finally:
            os.close(fd)
        return cls(ptr.value, nbytes)

    @staticmethod
    def layout(nbytes_list, regions):
        """Offsets of each output's slot in each region, and the total size."""
        offsets, total = [], 0
        for _ in range(regions):
            row = []
            for n in nbytes_list:
                row.append(total)
                total += (n + Exchange.ALIGN - 1) // Exchange.ALIGN * Exchange.ALIGN
            offsets.append(row)
        return offsets, total

    def fill(self, offset, nbytes, value=0xFF):
        if nbytes > 0:
            _check(_LIB.krv_fill(self.ptr + offset, nbytes, value), "krv_fill")

    def write(self, offset, t):
        """Candidate side: copies a contiguous CUDA tensor's bytes into a slot."""
        if offset < 0 or offset + t.nbytes > self.nbytes:
            raise VerifyCudaError("output does not fit its exchange slot")
        _check(_LIB.krv_copy(self.ptr + offset, t.data_ptr(), t.nbytes), "krv_copy")

    def tensor(self, offset, numel, dtype):
        return view(self.ptr + offset, numel, dtype)

    def release(self):
        if self.ptr:
            _LIB.krv_exchange_release(self.ptr, self.nbytes)
            self.ptr = 0
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def fd_socket(sock_fd):
    """A socket object over an inherited unix socket fd (a dup of it)."""
    return socket.socket(fileno=os.dup(sock_fd))


def send_fd(sock_fd, fd):
    with fd_socket(sock_fd) as s:
        socket.send_fds(s, [b"x"], [fd])


def recv_fd(sock):
    """The one fd the reference sent on `sock` (a socket object)."""
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if len(fds) != 1:
        raise VerifyCudaError("no exchange fd received")
    return fds[0]
