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
  * a block's inputs are written by the reference after its clock starts
    (one copy from its own staging): before that the executor's views hold
    poison, so no work on the inputs can start before the clock does;
  * every read inside the clock is the reference's own: on a GPU exchange
    the executor only says where each output lies (the CUDA IPC handle of the
    segment of its own memory, an offset) and the reference maps the segment
    and ends its clock by sealing the outputs there: one launch that reads
    them into a digest under a key only it holds (verify_cuda.table_digest).
    There is no copy in the candidate's process to skip, defer or fold into
    its kernel. Elsewhere (the file exchange, a segment that cannot be
    exported) the executor copies the output into its slot of the output
    area, at its own cost, and the seal is a copy (the snapshot);
  * after the clock the reference copies the outputs into its own memory
    (the snapshot) under the same digest, which must equal the seal's; later
    it checks that they still equal the snapshot (work deferred past "done"),
    poisons them and the area (0xFF: NaN for floats), and once the executor
    is idle checks the poison is intact.
Trust runs one way: the reference decides every offset and size it reads,
bounded by the segment it mapped; the executor can only point at its own
memory and write bytes the reference checks.
"""
import bisect
import os
import secrets
import time

import numpy as np
import torch

import verify_cuda

ALIGN = 512
EXCHANGE_FILE = "exchange.bin"
STAGE_ABOVE_TENSORS = 8  # blocks with more input tensors are staged and copied in once
CHUNK = 1 << 20          # the table launch's largest unit of work
MIN_CHUNK = 1 << 16      # its smallest: below, a block's table read costs more than its copy
CHUNKS_FOR_ALL_SMS = 132 * 8  # an H100's SMs, 8 blocks each: every SM busy, enough bytes in flight
KEEP_MAPPINGS_BLOCKS = 2  # segments unused for this many blocks are unmapped (eager and graph blocks alternate)
# Segments the executor names before the clock and the reference maps there:
# its caching allocator holds about two blocks of outputs (the last block's,
# kept until the next call, and the cached ones the next block reuses), up to
# 256 forwards each. Fewer left outputs in segments mapped inside the clock
# (151 of them, 9.5 ms of a 170-forward block, on an H200).
MOST_HELD_SEGMENTS = 2048


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


def not_filled(u8, spans, value=0xFF):
    """Words of the CUDA byte tensor `u8` within `spans` ([lo, hi) byte
    offsets) that are not `value` repeated: one table launch (_chunks' pieces,
    each one thread block) and one wait."""
    base = u8.data_ptr()
    table = _chunks([(base + lo, 0, hi - lo) for lo, hi in spans if hi > lo])
    return verify_cuda.table(verify_cuda.TABLE_NOT_FILLED, table, value)


def copy_rates(nbytes, rounds=5):
    """Our two copies inside a block's clock, with the GPU to themselves, the
    fastest of `rounds`: (input copy, seal) in bytes per us. The same calls a
    block makes: write_inputs' copy of a staging buffer into an exportable
    area, and seal's keyed read over _chunks' table of it."""
    ex = verify_cuda.Exchange.create(nbytes)
    try:
        area = _u8_view(ex)[:nbytes]
        staging = torch.full((nbytes,), 0x5A, dtype=torch.uint8, device=area.device)
        table = _chunks([(area.data_ptr(), area.data_ptr(), nbytes)])
        digest = torch.zeros(1, dtype=torch.int64, device=area.device)
        best_in = best_seal = float("inf")
        for _ in range(rounds):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            area.copy_(staging)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            verify_cuda.table_digest(table, secrets.randbits(64), digest)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            best_in, best_seal = min(best_in, t1 - t0), min(best_seal, t2 - t1)
        del area, staging
        return nbytes / (best_in * 1e6), nbytes / (best_seal * 1e6)
    finally:
        ex.release()


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


def _map_file(path, nbytes):
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


def _flat_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


# ----- reference side ---------------------------------------------------------

class Snapshot:
    """A block's outputs as the reference read them: its buffer (the output
    area's layout), which outputs were located, why the others could not be
    read, and on CUDA the table of (source, our copy, bytes) chunks that the
    seal, the snapshot, the late-write check and the poison all run over,
    with the seal's secret key and its two digests (at the clock's end, of
    what the snapshot copied)."""

    def __init__(self, snap, nbytes):
        self.snap, self.nbytes = snap, nbytes
        self.located, self.errors = set(), {}
        self.table = None
        self.key = secrets.randbits(64)
        self.digests = torch.zeros(2, dtype=torch.int64, device=snap.device) if snap is not None else None


def chunk_bytes(total):
    """The table's chunk size for `total` bytes: small enough that a few tens
    of MB still spread over every SM (one 1 MiB chunk per block left half an
    H100 idle on a 75 MB output: 440 GB/s), at most CHUNK so that the table of
    a GB stays a few thousand rows; a multiple of MIN_CHUNK (16-byte words)."""
    want = -(-int(total) // CHUNKS_FOR_ALL_SMS)
    return min(CHUNK, max(MIN_CHUNK, -(-want // MIN_CHUNK) * MIN_CHUNK))


def _chunks(entries):
    """(n, 3) int64 tensor of (src, dst, bytes) chunks of at most
    chunk_bytes(total) bytes, in pinned host memory the table launch reads
    directly (no copy to the device and no torch op inside the clock: numpy
    on its buffer)."""
    table = torch.empty((0, 3), dtype=torch.int64)
    if entries:
        ent = np.asarray(entries, dtype=np.int64)
        step = chunk_bytes(ent[:, 2].sum())
        count = (ent[:, 2] + step - 1) // step
        which = np.repeat(np.arange(len(entries)), count)
        first = np.repeat(np.cumsum(count) - count, count)
        off = (np.arange(int(count.sum())) - first) * step
        table = torch.empty((len(which), 3), dtype=torch.int64, pin_memory=True)
        view = table.numpy()
        view[:, 0] = ent[which, 0] + off
        view[:, 1] = ent[which, 1] + off
        view[:, 2] = np.minimum(ent[which, 2] - off, step)
    return table


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
        self.mappings = {}  # handle -> [ptr, size, last block used]
        self.blocks = 0

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
        in device memory). Staged rows' tensors become views of the staging
        (rows is a list of lists, rebound in place): one copy of the inputs
        stays ours, the one the fp64 outputs are computed from later."""
        lay = self.layout
        if sum(isinstance(x, torch.Tensor) for xs in rows for x in xs) <= STAGE_ABOVE_TENSORS:
            return {"rows": rows, "bytes": None}
        staging = torch.full((lay.in_row * len(rows),), 0xFF, dtype=torch.uint8, device=self.u8.device)
        for k, xs in enumerate(rows):
            for j, x in enumerate(xs):
                if isinstance(x, torch.Tensor) and x.numel():
                    off = lay.in_off(k, j)
                    staging[off:off + x.nbytes].copy_(_flat_bytes(x))
                    xs[j] = staging[off:off + x.nbytes].view(x.dtype).view(x.shape)
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

    def snapshot_for(self, rows):
        """Before the clock: our buffer for the block's outputs (laid out as
        the output area's first `rows` rows), not yet located or taken."""
        nbytes = self.layout.out_row * rows
        snap = torch.empty(nbytes, dtype=torch.uint8, device=self.u8.device) if self.kind == "gpu" else None
        return Snapshot(snap, nbytes)

    def begin_block(self):
        """Before the clock: segments unused for KEEP_MAPPINGS_BLOCKS blocks are unmapped."""
        self.blocks += 1
        self._unmap_unused()

    def premap(self, handles, most=MOST_HELD_SEGMENTS):
        """Before the clock: maps the segments the executor holds (its word;
        at most `most`), so that locating outputs in them costs no mapping
        inside the clock. Unmappable ones are left for locate to report."""
        if self.kind != "gpu" or not isinstance(handles, list):
            return
        for handle in handles[:most]:
            if isinstance(handle, str):
                self._map(handle)

    def locate(self, shot, metas_all, segments):
        """Where each output is (the executor's word, bounded here): a mapped
        segment of its memory at an offset, or its slot of the output area.
        Builds the table the snapshot is taken with; what cannot be read is
        recorded per output (shot.errors) and fails its comparison. Returns
        how many segments it had to map (premap had not)."""
        lay = self.layout
        entries = []
        mapped = {}
        before = len(self.mappings)
        for k, metas in enumerate(metas_all if isinstance(metas_all, list) else []):
            if k * lay.out_row >= shot.nbytes:
                break
            for j, meta in enumerate(metas if isinstance(metas, list) else []):
                n = lay.out_sizes[j] if j < len(lay.out_sizes) else 0
                if not n or not isinstance(meta, dict):
                    continue
                dst = lay.out_off(k, j) - lay.in_area
                if "segment" in meta:
                    src, why = self._segment_source(meta, n, segments, mapped)
                    if why:
                        shot.errors[(k, j)] = why
                        continue
                elif meta.get("slot") == j:
                    src = self.u8.data_ptr() + lay.out_off(k, j) if self.kind == "gpu" else None
                else:
                    continue
                shot.located.add((k, j))
                if self.kind == "gpu":
                    entries.append((src, shot.snap.data_ptr() + dst, n))
        if self.kind == "gpu":
            shot.table = _chunks(entries)
        return len(self.mappings) - before

    def _segment_source(self, meta, n, segments, mapped):
        """(device address, "") of an output in an exported segment, or (None, why)."""
        if self.kind != "gpu":
            return None, "an exported segment, but this exchange is not on the GPU"
        try:
            idx, off = int(meta["segment"]), int(meta["offset"])
        except (KeyError, TypeError, ValueError):
            return None, "malformed segment reference"
        if not isinstance(segments, list) or not 0 <= idx < len(segments) or not isinstance(segments[idx], str):
            return None, f"segment {idx} not among the block's {len(segments or [])}"
        handle = segments[idx]
        if handle not in mapped:
            mapped[handle] = self._map(handle)
        ptr, size, why = mapped[handle]
        if why:
            return None, why
        if off < 0 or off + n > size:
            return None, f"bytes [{off}, {off + n}) outside its segment of {size}"
        return ptr + off, ""

    def _map(self, handle):
        """(ptr, size, "") of an exported segment, mapped once and kept while used."""
        entry = self.mappings.get(handle)
        if entry is None:
            try:
                ptr, size = verify_cuda.ipc_open(handle)
            except (verify_cuda.VerifyCudaError, ValueError) as e:
                return None, 0, f"segment not mappable ({e})"[:300]
            entry = self.mappings[handle] = [ptr, size, 0]
        entry[2] = self.blocks
        return entry[0], entry[1], ""

    def _unmap_unused(self):
        for handle in [h for h, e in self.mappings.items() if e[2] <= self.blocks - KEEP_MAPPINGS_BLOCKS]:
            ptr = self.mappings.pop(handle)[0]
            try:
                verify_cuda.ipc_close(ptr)
            except verify_cuda.VerifyCudaError:
                pass  # the executor's memory, already gone with it

    def seal(self, shot):
        """The clock's last work: on CUDA one read of the located outputs where
        they lie, into a digest under the block's secret key (one launch, no
        write: half a copy's traffic); on a file exchange the snapshot itself."""
        if self.kind == "gpu":
            verify_cuda.table_digest(shot.table, shot.key, shot.digests[0:1])
        else:
            lay = self.layout
            shot.snap = self.u8[lay.in_area:lay.in_area + shot.nbytes].clone()

    def take(self, shot):
        """After the clock: the sealed outputs into our snapshot. True when
        what it copied is not what was sealed: an output changed after the
        clock ended (work deferred past "done")."""
        if self.kind != "gpu":
            return False  # sealed by the snapshot itself
        verify_cuda.table_digest(shot.table, shot.key, shot.digests[1:2], copy=True)
        return bool(shot.digests[0] != shot.digests[1])

    def output(self, shot, k, j, numel, dtype):
        """Output j of row k as it was in the snapshot; None where it was not located."""
        if (k, j) not in shot.located:
            return None
        off = self.layout.out_off(k, j) - self.layout.in_area
        return shot.snap[off:off + numel * dtype.itemsize].view(dtype)

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

    def outputs_changed(self, shot):
        """Did an output change after the snapshot? (work deferred past "done",
        later than the snapshot)"""
        if self.kind == "gpu":
            return verify_cuda.table(verify_cuda.TABLE_DIFF, shot.table) > 0
        lay = self.layout
        return not torch.equal(self.u8[lay.in_area:lay.in_area + shot.nbytes], shot.snap)

    def poison_intact(self, rows, shot=None, chunk=1 << 28):
        """Still poison since we poisoned it? (a write after the block: work deferred past "done")"""
        lay = self.layout
        spans = ((0, lay.in_row * rows), (lay.in_area, lay.in_area + lay.out_row * rows))
        if self.u8.is_cuda and verify_cuda.available():
            # One launch and one wait for both areas (the torch compare took a
            # pass, a bool temporary and a wait per 256 MB: ~10 ms for 10 GB).
            if not_filled(self.u8, spans):
                return False
        else:
            for lo, hi in spans:
                for s in range(lo, hi, chunk):
                    if not bool((self.u8[s:min(hi, s + chunk)] == 0xFF).all()):
                        return False
        return shot is None or shot.table is None or verify_cuda.table(verify_cuda.TABLE_NOT_FILLED, shot.table) == 0

    def poison(self, rows, shot=None):
        """Both areas' used rows, and the outputs where they were read, back to
        poison: no value outlives its block."""
        lay = self.layout
        self.u8[:lay.in_row * rows].fill_(0xFF)
        self.u8[lay.in_area:lay.in_area + lay.out_row * rows].fill_(0xFF)
        if shot is not None and shot.table is not None:
            verify_cuda.table(verify_cuda.TABLE_FILL, shot.table)

    def release(self):
        self.u8 = None
        self.blocks += KEEP_MAPPINGS_BLOCKS
        self._unmap_unused()
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
        self.ipc_error = ""  # set once a segment could not be exported: outputs go to slots
        self.held = []
        self._exports = {}  # (address, size) -> (driver's buffer id, handle): held_segments
        self._export_bases = []  # its keys, sorted: which export holds an output's address
        self._held = (None, [])  # (the allocator's segment counters, handles) of the last held_segments
        self._views = {}  # (row, input) -> (descriptor, view): the area's views, made once per mapping

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
            self._views = {}
            self.generation = int(offer["generation"])
            self.note = offer["kind"]

    def inputs(self, k, descs):
        """Row k's arguments: views of the area (shape and dtype from the call),
        and plain values as sent. A view is made once per mapping and kept
        while its descriptor and its own shape and place are unchanged (a
        Model may reshape its input in place): ~20 us a view otherwise."""
        xs = []
        for j, d in enumerate(descs or []):
            if not isinstance(d, dict):
                raise ValueError("malformed input descriptor")
            if "value" in d:
                xs.append(d["value"])
                continue
            off = self.layout.in_off(k, j)
            kept = self._views.get((k, j))
            if kept is not None and kept[0] == d:
                v, shape, ptr = kept[1], kept[2], kept[3]
                if v.shape == shape and v.is_contiguous() and v.data_ptr() == ptr:
                    xs.append(v)
                    continue
            shape = [int(s) for s in d["shape"]]
            dtype = dtype_of(d["dtype"])
            numel = 1
            for s in shape:
                numel *= s
            nbytes = numel * dtype.itemsize
            if nbytes > self.layout.in_sizes[j]:
                raise ValueError(f"input {j} does not fit its slot")
            v = self.u8[off:off + nbytes].view(dtype).view(shape)
            self._views[(k, j)] = (d, v, v.shape, v.data_ptr())
            xs.append(v)
        return xs

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

    def locate(self, k, j, o, segments):
        """Where the reference reads output j of row k: {"segment", "offset"}
        in an exported segment of this process's memory (`segments`, the
        block's list, grows by one per new segment), else {"slot"} after a
        copy into the output area; None when it fits neither. Keeps what it
        located alive until the next block (release_held)."""
        if j >= len(self.layout.out_sizes) or o.nbytes != self.layout.out_sizes[j] or o.nbytes == 0:
            return None
        if self.note == "gpu" and o.is_cuda and not self.ipc_error:
            if not o.is_contiguous():
                o = o.contiguous()  # our copy, at the forward's cost: the reference reads bytes in order
            ptr = o.data_ptr()
            try:
                for idx, (base, size) in enumerate(segments.ranges):
                    if base <= ptr < base + size:  # a live tensor's segment cannot be freed within a block
                        break
                else:
                    handle, base, size = self._export(ptr)
                    segments.append(handle, base, size)
                    idx = len(segments.ranges) - 1
                self.held.append(o)
                return {"segment": idx, "offset": ptr - base}
            except verify_cuda.VerifyCudaError as e:
                self.ipc_error = str(e)[:200]  # slots from now on
        return {"slot": j} if self.put(k, j, o) else None

    def held_segments(self, most=MOST_HELD_SEGMENTS):
        """Before the clock: every segment of this process's caching allocator,
        exported, so that the reference maps them there rather than inside its
        clock when an output turns out to lie in one (an export is kept while
        the driver's id of the allocation at that address is unchanged)."""
        if self.note != "gpu" or self.ipc_error:
            return []
        # The segments change only when one is made, freed or resized; the
        # snapshot walks every block of every segment (~4 ms a block of 511).
        stats = torch.cuda.memory_stats()
        counters = (stats.get("segment.all.allocated"), stats.get("segment.all.freed"),
                    stats.get("reserved_bytes.all.current"), most)
        if counters == self._held[0]:
            return list(self._held[1])
        handles, seen = [], set()
        for seg in torch.cuda.memory_snapshot()[:most]:
            key = (int(seg["address"]), int(seg["total_size"]))
            seen.add(key)
            try:
                bid = verify_cuda.buffer_id(key[0])
                kept = self._exports.get(key)
                if kept is None or kept[0] != bid:
                    kept = self._exports[key] = (bid, verify_cuda.ipc_export(key[0])[0])
            except verify_cuda.VerifyCudaError:
                continue  # not exportable (then its outputs go to slots)
            handles.append(kept[1])
        for key in [k for k in self._exports if k not in seen]:
            del self._exports[key]
        self._export_bases = sorted(self._exports)
        self._held = (counters, list(handles))
        return handles

    def _export(self, ptr):
        """(handle, base, size) of the segment holding `ptr`. Inside the clock:
        the export made before it when that segment is still the same
        allocation (cuIpcGetMemHandle costs ~0.1-0.4 ms; the buffer id check a
        few us), else a new export (a segment the forward allocated)."""
        i = bisect.bisect_right(self._export_bases, (ptr, float("inf"))) - 1
        if i >= 0:
            base, size = self._export_bases[i]
            bid, handle = self._exports[(base, size)]
            try:
                if base <= ptr < base + size and verify_cuda.buffer_id(base) == bid:
                    return handle, base, size
            except verify_cuda.VerifyCudaError:
                pass  # that segment is gone (freed since "armed", a capture's pool released)
        return verify_cuda.ipc_export(ptr)

    def release_held(self):
        """The last block's outputs are no longer read by the reference."""
        self.held = []

    def status(self):
        note = self.note or "unmapped"
        return f"{note} (outputs in slots: {self.ipc_error})" if self.ipc_error else note


class Segments:
    """A block's exported segments: their handles (sent to the reference) and address ranges."""

    def __init__(self):
        self.handles, self.ranges = [], []

    def append(self, handle, base, size):
        self.handles.append(handle)
        self.ranges.append((base, size))


def export_outputs(flat, k, exchange, segments):
    """Says where row k's outputs are for the reference to read
    (CandidateExchange.locate); returns the metadata the reference checks first."""
    metas = []
    for j, o in enumerate(flat):
        meta = {"type": type(o).__name__}
        if isinstance(o, torch.Tensor):
            meta.update(tensor_meta(o))
            if type(o) is torch.Tensor and o.layout == torch.strided:
                meta.update(exchange.locate(k, j, o, segments) or {})
        metas.append(meta)
    return metas
