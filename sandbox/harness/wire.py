"""How a call's inputs and outputs travel between the reference process and
the candidate process (the executor).

On CUDA with the helper library: one exportable device allocation the
reference process owns (verify_cuda.Exchange), mapped by the candidate once
(its fd arrives on the exchange socket). It holds, per region, one input slot
per tensor argument and one output slot per tensor output. The reference
writes a call's inputs into the call's input slots just before it sends the
call (so the candidate learns nothing of them earlier), and reads the outputs
from the output slots right after the reply. Output slots are poisoned (0xFF)
whenever the reference is not waiting for them. Elsewhere (CPU backend, a
host where the import fails, sizes that differ from the first call's): files
in the exchange directory, inputs mapped shared so the reference sees any
write the candidate makes to them.

Trust runs one way: the reference decides every offset and size; the
candidate can only ever read bytes the reference wrote and write the bytes
the reference will check.
"""
import os
import sys

import torch

import verify_cuda

PIPELINE_MAX_BYTES = 1 << 30  # above this per call, one region (no double buffering)


def _tensor_meta(o):
    return {"shape": list(o.shape), "dtype": str(o.dtype), "device": o.device.type, "layout": str(o.layout)}


_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8,
                               torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}


def dtype_of(name):
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}")
    return _DTYPES[name]


# ----- reference side ---------------------------------------------------------

class RefSlots:
    """The reference process's exchange memory and its layout."""

    slot_device = "cuda"  # where tensors must live to use slots (tests fake the memory on the CPU)

    def __init__(self, exchange_dir, device, xsock=-1):
        self.exchange_dir = exchange_dir
        self.device = device
        self.xsock = xsock
        self.ex = None
        self.sizes = None     # (input bytes, output bytes) the allocation was laid out for
        self.regions = []     # per region: {"in": [[off, n] | None], "out": [[off, n] | None]}
        self.note = "files" if device != "cuda" else ""
        self.offered = False  # the fd went out with the first call that used the slots

    def plan(self, xs, refs):
        """Lays the allocation out for the first call's inputs and outputs."""
        if self.ex is not None or self.note:
            return
        if self.xsock < 0 or not verify_cuda.available():
            self.note = "files (" + (verify_cuda.error() or "no exchange socket") + ")"
            return
        ins = [x.nbytes if isinstance(x, torch.Tensor) and x.device.type == self.slot_device else 0 for x in xs]
        outs = [o.nbytes if type(o) is torch.Tensor else 0 for o in refs]
        regions = 1 if sum(ins) + sum(outs) > PIPELINE_MAX_BYTES else 2
        offsets, total = verify_cuda.Exchange.layout(ins + outs, regions)
        try:
            self.ex = verify_cuda.Exchange.create(total)
        except (verify_cuda.VerifyCudaError, OSError) as e:
            self.note = f"files (exchange failed: {e})"[:300]
            return
        self.sizes, self.note = (ins, outs), "gpu"
        k = len(ins)
        for row in offsets:
            self.regions.append({"in": [[off, n] if n else None for off, n in zip(row[:k], ins)],
                                 "out": [[off, n] if n else None for off, n in zip(row[k:], outs)]})

    def region_for(self, xs, refs, index):
        """The region a call uses, or None (files) when its sizes differ."""
        if self.ex is None:
            return None
        ins = [x.nbytes if isinstance(x, torch.Tensor) and x.device.type == self.slot_device else 0 for x in xs]
        outs = [o.nbytes if type(o) is torch.Tensor else 0 for o in refs] if refs is not None else self.sizes[1]
        if (ins, outs) != self.sizes:
            return None
        return self.regions[index % len(self.regions)]

    def offer(self, region):
        """The call message's "exchange" entry."""
        if region is None:
            return None
        entry = {"bytes": self.ex.nbytes, "in": region["in"], "out": region["out"]}
        if not self.offered:
            verify_cuda.send_fd(self.xsock, self.ex.fd)
            self.offered = True
        return entry

    def write_inputs(self, xs, region, call_id):
        """Puts a call's inputs where the candidate will find them; returns the
        descriptors for the call message."""
        descs = []
        for j, x in enumerate(xs):
            if not isinstance(x, torch.Tensor):
                descs.append({"value": x})
                continue
            d = _tensor_meta(x)
            flat = x.detach().contiguous().reshape(-1)
            slot = region["in"][j] if region is not None else None
            if slot and x.device.type == self.slot_device:
                if flat.numel():
                    self.ex.write(slot[0], flat)
                d["slot"] = j
            else:
                name = f"in_{call_id}_{j}.bin"
                path = os.path.join(self.exchange_dir, name)
                if flat.numel():
                    dst = torch.from_file(path, shared=True, size=flat.numel(), dtype=flat.dtype)
                    dst.copy_(flat.cpu())
                    del dst
                    # The candidate maps it shared and runs as another uid
                    # (contain.SANDBOX_UID); only it and we reach the exchange dir.
                    os.chmod(path, 0o666)
                else:
                    open(path, "wb").close()
                d["file"] = name
            descs.append(d)
        return descs

    def read_input(self, desc, region):
        """What is in input slot/file `desc` now (after the call), flat."""
        numel = 1
        for s in desc["shape"]:
            numel *= s
        dtype = dtype_of(desc["dtype"])
        if "slot" in desc:
            return self.ex.tensor(region["in"][desc["slot"]][0], numel, dtype)
        path = os.path.join(self.exchange_dir, desc["file"])
        return torch.from_file(path, shared=False, size=numel, dtype=dtype) if numel else torch.empty(0, dtype=dtype)

    def drop_input_files(self, descs):
        for d in descs:
            if isinstance(d, dict) and "file" in d:
                try:
                    os.unlink(os.path.join(self.exchange_dir, d["file"]))
                except OSError:
                    pass

    def read_output(self, ref, meta, j, region):
        """The candidate's bytes for output j as a flat tensor, or (None, reason)."""
        nbytes = ref.numel() * ref.element_size()
        if "slot" in meta:
            slots = region["out"] if region is not None else []
            if meta.get("slot") != j or j >= len(slots) or not slots[j] or slots[j][1] != nbytes:
                return None, "output slot missing or of the wrong size"
            return self.ex.tensor(slots[j][0], ref.numel(), ref.dtype), None
        name = meta.get("file", "")
        path = os.path.join(self.exchange_dir, os.path.basename(name))
        if not name or not os.path.isfile(path) or os.path.getsize(path) != nbytes:
            return None, "output bytes missing or of the wrong size"
        host = torch.from_file(path, shared=False, size=ref.numel(), dtype=ref.dtype)
        os.unlink(path)
        return host, None

    def poison(self, region):
        """Done with a call: its slots go back to poison (outputs) and the
        inputs are overwritten too, so no value outlives its call."""
        if region is None:
            return
        for slot in region["out"] + region["in"]:
            if slot:
                self.ex.fill(slot[0], slot[1])

    def release(self):
        if self.ex is not None:
            self.ex.release()
            self.ex = None


# ----- candidate side ---------------------------------------------------------

class CandidateSlots:
    """The reference process's allocation, mapped here once."""

    def __init__(self, xsock, device="cuda"):
        self.device = device  # where the exchange memory lives (tests fake it on the CPU)
        # The socket object is made now, before the audit hook that forbids
        # socket creation is installed; receiving on it raises no audit event.
        try:
            self.sock = verify_cuda.fd_socket(xsock) if xsock >= 0 else None
        except OSError:
            self.sock = None
        self.ex = None
        self.region = None
        self.note = ""

    def accept(self, offer):
        """Takes a call's "exchange" entry; returns a log line or ""."""
        self.region = None
        if not isinstance(offer, dict) or self.note.startswith("failed"):
            return ""
        if self.ex is None:
            try:
                if not verify_cuda.available():
                    raise verify_cuda.VerifyCudaError(verify_cuda.error())
                if self.sock is None:
                    raise verify_cuda.VerifyCudaError("no exchange socket")
                self.ex = verify_cuda.Exchange.import_fd(verify_cuda.recv_fd(self.sock), int(offer["bytes"]))
            except (verify_cuda.VerifyCudaError, OSError, ValueError, KeyError) as e:
                self.note = f"failed: {e}"[:300]
                sys.stderr.write(f"[exchange] GPU slots unavailable ({e}); outputs go through files\n")
                return f"exchange: GPU slots unavailable ({e}); outputs go through files"
        self.region = offer
        return ""

    def status(self):
        return self.note or ("gpu" if self.ex is not None else "files")

    def input(self, j, numel, dtype):
        slot = self.region["in"][j] if self.region and j < len(self.region.get("in") or []) else None
        if not slot or self.ex is None:
            raise ValueError(f"input {j}: no slot")
        return self.ex.tensor(int(slot[0]), numel, dtype)

    def put(self, j, o):
        """Writes output j into its slot; False when it has none or does not fit."""
        outs = self.region.get("out") if self.region else None
        slot = outs[j] if outs is not None and j < len(outs) else None
        if not slot or self.ex is None or o.device.type != self.device or o.nbytes != slot[1]:
            return False
        self.ex.write(int(slot[0]), o.detach().contiguous())
        return True


def materialise_inputs(descs, slots, exchange_dir, device):
    """The call's arguments: views of the reference's slots, or the files
    mapped shared (a write to them is visible to the reference)."""
    xs = []
    for j, d in enumerate(descs or []):
        if not isinstance(d, dict):
            raise ValueError("malformed input descriptor")
        if "value" in d:
            xs.append(d["value"])
            continue
        shape = [int(s) for s in d["shape"]]
        numel = 1
        for s in shape:
            numel *= s
        dtype = dtype_of(d["dtype"])
        if "slot" in d:
            flat = slots.input(int(d["slot"]), numel, dtype)
        elif numel:
            flat = torch.from_file(os.path.join(exchange_dir, os.path.basename(d["file"])), shared=True,
                                   size=numel, dtype=dtype).to(d.get("device") or device)
        else:
            flat = torch.empty(0, dtype=dtype, device=d.get("device") or device)
        xs.append(flat.view(shape))
    return xs


def export_outputs(flat, exchange_dir, prefix, slots=None):
    """Hands each plain strided tensor's bytes to the reference process: into
    its device slot when it has one, else to a file in the exchange
    directory; returns the metadata the reference checks first."""
    metas = []
    for j, o in enumerate(flat):
        meta = {"type": type(o).__name__}
        if isinstance(o, torch.Tensor):
            meta.update(_tensor_meta(o))
            if type(o) is torch.Tensor and o.layout == torch.strided and o.numel() > 0:
                if slots is not None and slots.put(j, o):
                    meta["slot"] = j
                    metas.append(meta)
                    continue
                name = f"out_{prefix}_{j}.bin"
                dst = torch.from_file(os.path.join(exchange_dir, name), shared=True, size=o.numel(), dtype=o.dtype)
                dst.copy_(o.detach().reshape(-1))
                del dst
                meta["file"] = name
        metas.append(meta)
    return metas
