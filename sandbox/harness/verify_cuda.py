"""ctypes face of the trusted harness's CUDA helpers (cuda/verify_cuda.cu):
one-pass digests and tolerance checks, the GPU input exchange, the IPC
export of output segments and the table launch that copies, compares and
poisons them. Loaded
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
    lib.krv_check.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int,
                              ctypes.c_double, ctypes.c_double, ctypes.c_void_p, ctypes.c_ulonglong]
    lib.krv_sum_squares.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong]
    lib.krv_fill.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_int]
    lib.krv_copy.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_ulonglong]
    lib.krv_ipc_export.argtypes = [ctypes.c_ulonglong, ctypes.c_char_p, u64p, u64p]
    lib.krv_ipc_open.argtypes = [ctypes.c_char_p, u64p, u64p]
    lib.krv_ipc_close.argtypes = [ctypes.c_ulonglong]
    lib.krv_buffer_id.argtypes = [ctypes.c_ulonglong, u64p]
    lib.krv_table.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong]
    lib.krv_table_digest.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_longlong, ctypes.c_ulonglong,
                                     ctypes.c_ulonglong]
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


IPC_HANDLE_BYTES = 64


def ipc_export(ptr):
    """(handle hex, base, size) of the cudaMalloc'd segment holding device
    address `ptr`: what the reference needs to map it (ipc_open)."""
    handle = ctypes.create_string_buffer(IPC_HANDLE_BYTES)
    base, size = ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
    _check(_LIB.krv_ipc_export(ptr, handle, ctypes.byref(base), ctypes.byref(size)), "krv_ipc_export")
    return handle.raw.hex(), base.value, size.value


def ipc_open(handle_hex):
    """(ptr, size) of another process's exported segment, mapped here."""
    raw = bytes.fromhex(handle_hex)
    if len(raw) != IPC_HANDLE_BYTES:
        raise VerifyCudaError(f"an IPC handle has {IPC_HANDLE_BYTES} bytes, not {len(raw)}")
    ptr, size = ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
    _check(_LIB.krv_ipc_open(raw, ctypes.byref(ptr), ctypes.byref(size)), "krv_ipc_open")
    return ptr.value, size.value


def buffer_id(ptr):
    """The driver's unique id of the allocation holding device address `ptr`."""
    out = ctypes.c_ulonglong(0)
    _check(_LIB.krv_buffer_id(ptr, ctypes.byref(out)), "krv_buffer_id")
    return out.value


def ipc_close(ptr):
    _check(_LIB.krv_ipc_close(ptr), "krv_ipc_close")


TABLE_DIFF, TABLE_FILL, TABLE_NOT_FILLED = 1, 2, 3


def table(mode, chunks, value=0xFF):
    """One launch over `chunks`, an (n, 3) int64 tensor of (a, b, bytes) in
    device or pinned host memory (the kernel reads it where it is)
    (cuda/verify_cuda.cu krv_table): count differing words, fill a, or
    count words of a that are not `value`. Asynchronous on the default
    stream for the fill (None); the counts synchronise (an int)."""
    n = chunks.shape[0]
    if n == 0:
        return None if mode == TABLE_FILL else 0
    count = torch.zeros(1, dtype=torch.int64, device="cuda") if mode in (TABLE_DIFF, TABLE_NOT_FILLED) else None
    _check(_LIB.krv_table(mode, chunks.data_ptr(), n, value, count.data_ptr() if count is not None else 0),
           "krv_table")
    return None if count is None else int(count.item())


def table_digest(chunks, key, out, copy=False):
    """One launch over `chunks` (as `table`'s): adds the keyed digest of
    every chunk's source bytes to `out` (a zeroed int64 CUDA tensor of one
    element), copying them to the destinations first when `copy`
    (cuda/verify_cuda.cu krv_table_digest). Asynchronous: nothing is
    allocated and nothing waits, so it may run inside a clock."""
    if chunks.shape[0]:
        _check(_LIB.krv_table_digest(1 if copy else 0, chunks.data_ptr(), chunks.shape[0],
                                     int(key) & ((1 << 64) - 1), out.data_ptr()), "krv_table_digest")


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


CHECK_SLOT = 8  # int64 words per output of a batched check (krv_check's out)


def checkable(t):
    """Whether check_launch takes outputs of t's kind (floating, on the GPU)."""
    return t.is_cuda and t.dtype in _TOLERANCE


def check_slots(numels):
    """Zeroed result slots for outputs of these sizes, the first-index words
    set to each size (krv_check's contract)."""
    host = torch.zeros((len(numels), CHECK_SLOT), dtype=torch.int64)
    host[:, 2] = torch.tensor(list(numels), dtype=torch.int64)
    host[:, 3] = host[:, 2]
    return host.to("cuda")


def check_launch(got, lo, hi, atol, rtol, slot, rms_sum=None):
    """Launches, without waiting, the tolerance check of `got` against `lo`
    and the precision check's sums against `hi` (float64, or None: `lo`)
    into `slot` (a row of check_slots); `rms_sum` (a float64 CUDA scalar
    from sum_squares_launch) scales atol by max(1, lo's root mean square)."""
    kind = _TOLERANCE[lo.dtype]
    _check(_LIB.krv_check(got.data_ptr(), lo.data_ptr(), hi.data_ptr() if hi is not None else None, lo.numel(),
                          kind, float(atol), float(rtol), rms_sum.data_ptr() if rms_sum is not None else None,
                          slot.data_ptr()), "krv_check")


def sum_squares_launch(x):
    """A float64 CUDA scalar that will hold the sum of x's finite squares."""
    out = torch.zeros((), dtype=torch.float64, device="cuda")
    _check(_LIB.krv_sum_squares(x.data_ptr(), x.numel(), _TOLERANCE[x.dtype], out.data_ptr()), "krv_sum_squares")
    return out


def read_checks(slots):
    """Per slot: (not_close, new_nan, first_not_close, first_new_nan, err2,
    ref2, own2), the counts and the sums of krv_check (one synchronisation)."""
    host = slots.cpu()
    sums = host[:, 4:7].contiguous().view(torch.float64).tolist()
    return [tuple(int(v) for v in row[:4]) + tuple(s) for row, s in zip(host.tolist(), sums)]


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
    return torch.as_tensor(_Device(ptr, (numel * dtype.itemsize,), torch.uint8), device="cuda").view(dtype)


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
