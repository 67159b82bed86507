"""How a block's inputs and outputs travel between the reference process and
the executor (the candidate process).

One exchange area per evaluation, owned by the reference process: device
memory it exports (verify_cuda.Exchange, mapped by the executor once through
an fd on the exchange socket) on CUDA, a shared file in the exchange
directory on the CPU backend (or where the helper library is missing). The
reference lays it out at the first call: an input area, then an output area,
each holding `capacity` rows, one row per forward of a block, one 512-byte
aligned slot per tensor argument or output.

The trust rules it serves (docs/HARNESS.md):
  * a block's inputs are written before the clock, scrambled (XOR a
    splitmix64 keystream of a fresh 64-bit key); the key travels with "go" at
    the clock's start and the executor unscrambles the rows inside it, so no
    work on the inputs can start before the clock does, and the GPU does no
    work of the reference's between the clock's start and the executor's
    forwards (a switch between two processes' contexts costs ~0.3 ms on an H100);
  * the executor views its rows before the clock (views cost nothing inside
    it) and writes each forward's outputs into its row of the output area;
  * right after the executor says "done" the reference copies the whole
    output area into its own memory (the snapshot), still inside its clock,
    so work deferred past "done" is either still counted or reads as wrong;
    later it checks that the area still equals the snapshot;
  * both areas go back to poison (0xFF: NaN for floats) between blocks.
Trust runs one way: the reference decides every offset and size; the executor
can only read bytes the reference wrote and write bytes the reference checks.
"""
import os

import torch

import verify_cuda

ALIGN = 512
EXCHANGE_FILE = "exchange.bin"
STAGE_ABOVE_TENSORS = 8  # blocks with more input tensors are staged and copied in once


def _aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def tensor_meta(o):
    return {"shape": list(o.shape), "dtype": str(o.dtype), "device": o.device.type, "layout": str(o.layout)}


_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8,
                               torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}


def dtype_of(name):
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}")
    return _DTYPES[name]


def tensor_bytes(values):
    """Bytes of each tensor in `values` (0 for anything else): a row's slot sizes."""
    return [v.nbytes if isinstance(v, torch.Tensor) else 0 for v in values]


class Layout:
    """Offsets of every slot: row k's input j at in_off(k, j), output j at
    out_off(k, j); the input area is [0, in_area), the output area
    [in_area, total)."""

    def __init__(self, in_sizes, out_sizes, capacity):
        self.in_sizes, self.out_sizes, self.capacity = list(in_sizes), list(out_sizes), int(capacity)
        self._in_pre, self._out_pre = self._prefix(self.in_sizes), self._prefix(self.out_sizes)
        self.in_row = self._in_pre[-1]
        self.out_row = self._out_pre[-1]
        self.in_area = self.in_row * self.capacity
        self.total = max(ALIGN, self.in_area + self.out_row * self.capacity)

    @staticmethod
    def _prefix(sizes):
        pre = [0]
        for n in sizes:
            pre.append(pre[-1] + (_aligned(n) if n else 0))
        return pre

    def in_off(self, k, j):
        return k * self.in_row + self._in_pre[j]

    def out_off(self, k, j):
        return self.in_area + k * self.out_row + self._out_pre[j]

    def fits(self, in_sizes, out_sizes):
        return list(in_sizes) == self.in_sizes and list(out_sizes) == self.out_sizes

    def describe(self):
        return {"in": self.in_sizes, "out": self.out_sizes, "capacity": self.capacity}


def _u8_view(exchange):
    """A GPU exchange allocation as one flat uint8 CUDA tensor."""
    return verify_cuda.view(exchange.ptr, exchange.nbytes, torch.uint8)


_M64 = (1 << 64) - 1


def _s64(u):
    """An unsigned 64-bit constant as the int64 torch holds it."""
    return u - (1 << 64) if u >= (1 << 63) else u


def _shr(z, s):
    """Logical right shift of int64 words (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def xor_keystream(area, key):
    """XORs `area` (flat uint8, a multiple of 8 bytes) in place with
    splitmix64(key + i) over its 8-byte words: a block's inputs sit in the
    exchange scrambled until the reference sends the key, at its clock's
    start. On CUDA one kernel (verify_cuda); elsewhere torch ops."""
    if area.numel() == 0:
        return
    key &= _M64
    if area.is_cuda:
        verify_cuda.xor_keystream(area, key)
        return
    words = area.view(torch.int64)
    z = torch.arange(words.numel(), dtype=torch.int64) + _s64(key)
    z = z + _s64(0x9E3779B97F4A7C15)
    z = (z ^ _shr(z, 30)) * _s64(0xBF58476D1CE4E5B9)
    z = (z ^ _shr(z, 27)) * _s64(0x94D049BB133111EB)
    words ^= z ^ _shr(z, 31)


def _map_file(path, nbytes):
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


def _flat_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


# ----- reference side ---------------------------------------------------------

class RefExchange:
    """The reference process's exchange area, its layout and its copies."""

    def __init__(self, exchange_dir, device, xsock=-1):
        self.exchange_dir, self.device, self.xsock = exchange_dir, device, xsock
        self.layout = None
        self.memory = None     # verify_cuda.Exchange, or the mapped file's tensor
        self.u8 = None         # the whole area, flat uint8, where the executor sees it
        self.kind = ""         # "gpu" or "file"
        self.generation = 0    # bumped at each (re)allocation; the executor remaps
        self.note = ""
        self._sent_generation = 0

    def ensure(self, in_sizes, out_sizes, capacity):
        """Allocates (or re-allocates, when a set's sizes differ) the area."""
        if self.layout is not None and self.layout.fits(in_sizes, out_sizes) and self.layout.capacity >= capacity:
            return
        self.release()
        self.layout = Layout(in_sizes, out_sizes, capacity)
        self.generation += 1
        why = ""
        if self.device == "cuda" and self.xsock >= 0 and verify_cuda.available():
            try:
                self.memory = verify_cuda.Exchange.create(self.layout.total)
                self.kind, self.u8 = "gpu", _u8_view(self.memory)
                self.note = "gpu"
                return
            except (verify_cuda.VerifyCudaError, OSError) as e:
                why = f"exchange failed: {e}"
        elif self.device == "cuda":
            why = verify_cuda.error() if self.xsock >= 0 else "no exchange socket"
        path = os.path.join(self.exchange_dir, EXCHANGE_FILE)
        with open(path, "wb") as f:
            f.truncate(self.layout.total)
        # The executor runs as another uid (contain.SANDBOX_UID); only it and
        # we reach the exchange directory.
        os.chmod(path, 0o666)
        self.memory = self.u8 = _map_file(path, self.layout.total)
        self.u8.fill_(0xFF)
        self.kind = "file"
        self.note = "file" if not why else f"file ({why})"[:300]

    def offer(self):
        """The call message's "exchange" entry (the fd travels once per allocation)."""
        # The GPU allocation is rounded up to the driver's granularity: the
        # importer maps exactly the size that was created.
        nbytes = self.memory.nbytes if self.kind == "gpu" else self.layout.total
        entry = {"kind": self.kind, "bytes": nbytes, "generation": self.generation,
                 "layout": self.layout.describe(), "file": EXCHANGE_FILE if self.kind == "file" else ""}
        if self.kind == "gpu" and self._sent_generation != self.generation:
            verify_cuda.send_fd(self.xsock, self.memory.fd)
        self._sent_generation = self.generation
        return entry

    def stage(self, rows):
        """Our own copy of a block's input area, laid out exactly as the
        exchange's, built before the clock so that one copy moves it in after
        the clock starts. A block of few tensors is written straight from them
        instead (the same number of copies, and no second copy of large inputs
        in device memory)."""
        lay = self.layout
        if sum(isinstance(x, torch.Tensor) for xs in rows for x in xs) <= STAGE_ABOVE_TENSORS:
            return {"rows": rows, "bytes": None}
        staging = torch.full((lay.in_row * len(rows),), 0xFF, dtype=torch.uint8, device=self.u8.device)
        for k, xs in enumerate(rows):
            for j, x in enumerate(xs):
                if isinstance(x, torch.Tensor) and x.numel():
                    off = lay.in_off(k, j)
                    staging[off:off + x.nbytes].copy_(_flat_bytes(x))
        return {"rows": rows, "bytes": staging}

    def write_inputs(self, staged):
        """Inside the clock: the staged inputs into the area."""
        if staged["bytes"] is not None:
            self.u8[:staged["bytes"].numel()].copy_(staged["bytes"])
            return
        for k, xs in enumerate(staged["rows"]):
            for j, x in enumerate(xs):
                if isinstance(x, torch.Tensor) and x.numel():
                    off = self.layout.in_off(k, j)
                    self.u8[off:off + x.nbytes].copy_(_flat_bytes(x))

    def scramble(self, rows, key):
        """Before the clock: the written inputs XOR the block's keystream."""
        xor_keystream(self.u8[:self.layout.in_row * rows], key)

    def snapshot(self, rows):
        """Inside the clock: our own copy of the first `rows` rows of the output area."""
        lay = self.layout
        return self.u8[lay.in_area:lay.in_area + lay.out_row * rows].clone()

    def output(self, snap, k, j, numel, dtype):
        """Output j of row k as it was in the snapshot."""
        off = self.layout.out_off(k, j) - self.layout.in_area
        size = torch.empty((), dtype=dtype).element_size()
        return snap[off:off + numel * size].view(dtype)

    def inputs_changed(self, staged):
        """Did anyone write to the input area since we wrote it? (trusted: our own copy)"""
        if staged["bytes"] is not None:
            return not torch.equal(self.u8[:staged["bytes"].numel()], staged["bytes"])
        for k, xs in enumerate(staged["rows"]):
            for j, x in enumerate(xs):
                if isinstance(x, torch.Tensor) and x.numel():
                    off = self.layout.in_off(k, j)
                    if not torch.equal(self.u8[off:off + x.nbytes], _flat_bytes(x)):
                        return True
        return False

    def outputs_changed(self, snap):
        """Did the output area change after the snapshot? (work deferred past "done")"""
        lay = self.layout
        return not torch.equal(self.u8[lay.in_area:lay.in_area + snap.numel()], snap)

    def poison_intact(self, rows, chunk=1 << 28):
        """Still poison since we poisoned it? (a write after the block: work deferred past "done")"""
        lay = self.layout
        for lo, hi in ((0, lay.in_row * rows), (lay.in_area, lay.in_area + lay.out_row * rows)):
            for s in range(lo, hi, chunk):
                if not bool((self.u8[s:min(hi, s + chunk)] == 0xFF).all()):
                    return False
        return True

    def poison(self, rows):
        """Both areas' used rows back to poison: no value outlives its block."""
        lay = self.layout
        self.u8[:lay.in_row * rows].fill_(0xFF)
        self.u8[lay.in_area:lay.in_area + lay.out_row * rows].fill_(0xFF)

    def release(self):
        self.u8 = None
        if isinstance(self.memory, verify_cuda.Exchange):
            self.memory.release()
        self.memory = None
        if self.kind == "file":
            try:
                os.unlink(os.path.join(self.exchange_dir, EXCHANGE_FILE))
            except OSError:
                pass
        self.kind = ""


# ----- candidate side ---------------------------------------------------------

class CandidateExchange:
    """The reference's area, mapped here; views of its rows."""

    def __init__(self, xsock, exchange_dir, device):
        self.exchange_dir, self.device = exchange_dir, device
        # The socket object is made now, before the audit hook that forbids
        # socket creation is installed; receiving on it raises no audit event.
        try:
            self.sock = verify_cuda.fd_socket(xsock) if xsock >= 0 else None
        except OSError:
            self.sock = None
        self.memory = self.u8 = None
        self.layout = None
        self.generation = 0
        self.note = ""

    def accept(self, offer):
        """Maps the area a call names (once per allocation)."""
        if not isinstance(offer, dict):
            raise ValueError("call without an exchange")
        if int(offer["generation"]) != self.generation:
            self.u8 = None
            if isinstance(self.memory, verify_cuda.Exchange):
                self.memory.release()
            nbytes = int(offer["bytes"])
            if offer["kind"] == "gpu":
                if self.sock is None:
                    raise ValueError("no exchange socket")
                self.memory = verify_cuda.Exchange.import_fd(verify_cuda.recv_fd(self.sock), nbytes)
                self.u8 = _u8_view(self.memory)
            else:
                self.memory = self.u8 = _map_file(
                    os.path.join(self.exchange_dir, os.path.basename(offer["file"])), nbytes)
            lay = offer["layout"]
            self.layout = Layout(lay["in"], lay["out"], lay["capacity"])
            self.generation = int(offer["generation"])
            self.note = offer["kind"]

    def inputs(self, k, descs):
        """Row k's arguments: views of the area (shape and dtype from the call),
        and plain values as sent."""
        xs = []
        for j, d in enumerate(descs or []):
            if not isinstance(d, dict):
                raise ValueError("malformed input descriptor")
            if "value" in d:
                xs.append(d["value"])
                continue
            shape = [int(s) for s in d["shape"]]
            dtype = dtype_of(d["dtype"])
            numel = 1
            for s in shape:
                numel *= s
            size = torch.empty((), dtype=dtype).element_size()
            off = self.layout.in_off(k, j)
            if numel * size > self.layout.in_sizes[j]:
                raise ValueError(f"input {j} does not fit its slot")
            xs.append(self.u8[off:off + numel * size].view(dtype).view(shape))
        return xs

    def unscramble(self, rows, key):
        """Inside the clock: the block's inputs in the clear (the key came with "go")."""
        xor_keystream(self.u8[:self.layout.in_row * rows], key)

    def needs_device_copy(self):
        """The area is host memory but the task runs on the GPU (no helper library)."""
        return self.u8 is not None and self.u8.device.type != self.device

    def put(self, k, j, o):
        """Writes output j of row k into its slot; False when it has none or does not fit."""
        if j >= len(self.layout.out_sizes) or o.nbytes != self.layout.out_sizes[j] or o.nbytes == 0:
            return False
        off = self.layout.out_off(k, j)
        self.u8[off:off + o.nbytes].copy_(_flat_bytes(o))
        return True

    def status(self):
        return self.note or "unmapped"


def export_outputs(flat, k, exchange):
    """Hands row k's outputs to the reference process (into their slots);
    returns the metadata the reference checks first."""
    metas = []
    for j, o in enumerate(flat):
        meta = {"type": type(o).__name__}
        if isinstance(o, torch.Tensor):
            meta.update(tensor_meta(o))
            if type(o) is torch.Tensor and o.layout == torch.strided and exchange.put(k, j, o):
                meta["slot"] = j
        metas.append(meta)
    return metas
