"""The reference process: trusted task code only. It builds each secret input
set, runs the frozen Model, keeps the outputs in its own memory, tells the
candidate to run the same set, then compares what the candidate wrote to the
exchange directory. Its result is the correctness half of the verdict."""
import os
import time
import traceback

import torch

import inputs as inputs_lib
import loader
import profiling
import protocol
import verify_cuda


class Outputs:
    """Where the candidate's outputs arrive. Always: files in the exchange
    directory (host memory). On CUDA with the helper library: slots of one
    device allocation this process owns and the candidate process maps (its
    fd goes over a unix socket), so outputs stay on the GPU. Slots are
    poisoned (0xFF: NaN, or -1) whenever this process is not waiting for the
    candidate to fill them: a slot never holds anything but the candidate's
    bytes written since the last request."""

    RECHECK = "recheck"  # profile re-checks use region 0's slots

    def __init__(self, exchange_dir, device, xsock=-1):
        self.exchange_dir = exchange_dir
        self.device = device
        self.xsock = xsock
        self.ex = None
        self.sizes = None    # output bytes the allocation was laid out for (set 0)
        self.regions = []    # per region: per output [offset, nbytes] or None
        self.by_set = {}     # set -> the region's slots it was offered
        self.note = "files" if device != "cuda" else ""

    def offer(self, refs, i, regions):
        """The "exchange" entry of set i's go message, or None (files). The
        allocation is made once, for set 0's outputs; a later set whose
        outputs differ in size uses files."""
        sizes = [o.nbytes if type(o) is torch.Tensor else 0 for o in refs]
        if self.ex is None and i == 0 and not self.note:
            if self.xsock < 0 or not verify_cuda.available():
                self.note = "files (" + (verify_cuda.error() or "no exchange socket") + ")"
                return None
            offsets, total = verify_cuda.Exchange.layout(sizes, regions)
            try:
                self.ex = verify_cuda.Exchange.create(total)
                verify_cuda.send_fd(self.xsock, self.ex.fd)
            except (verify_cuda.VerifyCudaError, OSError) as e:
                self.note = f"files (exchange failed: {e})"[:300]
                self.release()
                return None
            self.sizes, self.note = sizes, "gpu"
            self.regions = [[[off, n] if n else None for off, n in zip(row, sizes)] for row in offsets]
        if self.ex is None or sizes != self.sizes:
            return None
        self.by_set[i] = self.regions[i % len(self.regions)]
        return {"bytes": self.ex.nbytes, "slots": self.by_set[i]}

    def read(self, ref, meta, j, key):
        """The candidate's bytes for output j of set `key` as a flat tensor
        (device slot or host file), or (None, reason)."""
        nbytes = ref.numel() * ref.element_size()
        if "slot" in meta:
            slots = self.regions[0] if key == self.RECHECK and self.regions else self.by_set.get(key) or []
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

    def poison(self, key):
        """Done reading set `key`: its slots go back to poison."""
        slots = self.regions[0] if key == self.RECHECK and self.regions else self.by_set.pop(key, None)
        for slot in slots or []:
            if slot:
                self.ex.fill(slot[0], slot[1])

    def release(self):
        if self.ex is not None:
            self.ex.release()
            self.ex = None


def compare(ref, meta, outputs, j=0, key=0, atol=1e-2, rtol=1e-2, chunk=1 << 28):
    """None if the candidate's output j matches, else a one-line reason."""
    if meta.get("type") != "Tensor":
        return f"is a {meta.get('type')}, expected a plain torch.Tensor"
    if meta.get("layout") != "torch.strided":
        return f"layout {meta.get('layout')}, expected torch.strided"
    if meta.get("device") != ref.device.type:
        return f"on {meta.get('device')}, expected {ref.device.type}"
    if meta.get("dtype") != str(ref.dtype):
        return f"dtype {meta.get('dtype')}, expected {ref.dtype}"
    if meta.get("shape") != list(ref.shape):
        return f"shape {meta.get('shape')}, expected {list(ref.shape)}"
    if ref.numel() == 0:
        return None
    got_all, why = outputs.read(ref, meta, j, key)
    if why:
        return why
    flat_ref = ref.reshape(-1)
    floating = ref.is_floating_point() or ref.is_complex()
    # Chunk by chunk: a 6.4 GB output compared whole with torch ops needs ~5
    # such buffers of temporaries on the GPU, which the candidate shares.
    for s in range(0, flat_ref.numel(), chunk):
        r = flat_ref[s:s + chunk]
        got = got_all[s:s + chunk].to(ref.device)
        if got.is_cuda and verify_cuda.available():
            bad, _, first, _ = verify_cuda.count_mismatches(got, r, atol, rtol)
            if not bad:
                continue
            # The rare path: torch ops find the words for the failure.
            why = _compare_chunk(got, r, s, ref, floating, atol, rtol)
            return why or (f"{bad} elements outside atol={atol:g} rtol={rtol:g}, first at "
                           f"{_at(ref, s + first)} (got {got[first].item():.6g}, expected {r[first].item():.6g})")
        why = _compare_chunk(got, r, s, ref, floating, atol, rtol)
        if why:
            return why
    return None


def _at(ref, flat_index):
    return [int(v) for v in torch.unravel_index(torch.tensor(flat_index), ref.shape)] if ref.dim() else []


def _compare_chunk(got, r, offset, ref, floating, atol, rtol):
    """The reason chunk [offset, offset + len) fails, with the global index."""
    if not floating:
        if torch.equal(got, r):
            return None
        k = int((got != r).nonzero()[0])
        return f"mismatch at {_at(ref, offset + k)}: got {got[k].item()}, expected {r[k].item()}"
    ref_nan = torch.isnan(r)
    new_nan = torch.isnan(got) & ~ref_nan
    if bool(new_nan.any()):
        k = int(new_nan.nonzero()[0])
        return f"NaN at {_at(ref, offset + k)} (expected {r[k].item():.6g}); NaN never passes"
    del new_nan
    close = torch.isclose(got, r, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    err = torch.where(ref_nan, torch.zeros_like(r), (got - r).abs())
    err = torch.nan_to_num(err, nan=float("inf"))
    k = int(err.argmax())
    frac = 1.0 - float(close.float().mean())
    scope = "" if r.numel() == ref.numel() else f" of [{offset}, {offset + r.numel()})"
    return (f"max abs err {float(err[k]):.4g} at {_at(ref, offset + k)} (got {got[k].item():.6g}, "
            f"expected {r[k].item():.6g}); {frac:.2%} of elements{scope} outside atol={atol:g} rtol={rtol:g}")


def _send(fd, msg):
    """False when the candidate is gone (its verdict comes from its messages
    and its exit status, not from our write failing)."""
    try:
        protocol.send(fd, msg)
        return True
    except (BrokenPipeError, OSError):
        return False


def run(job, to_cand, from_cand, result_fd, xsock=-1):
    device = job["device"]
    atol, rtol = job["atol"], job["rtol"]
    n = len(job["seeds"])
    result = {"sets": [], "candidate_flags": [], "candidate_error": None, "candidate_done": False,
              "fp_mismatch": False, "mutated": False, "ref_error": None, "details": [], "forward_ms": []}
    reader = protocol.LineReader(from_cand)
    pending = {}
    t_start = time.perf_counter()
    clock = protocol.Timeline(job.get("t0_mono"))
    outputs = Outputs(job["exchange_dir"], device, xsock)
    try:
        if device == "cuda":
            torch.cuda.set_device(0)
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            verify_cuda.load(job.get("verify_cuda_lib", ""))
            clock.mark("cuda_init")
        mod = loader.load_module(job["reference_model"], "kernelrl_task_model")
        model, _ = inputs_lib.make_model(mod, job["init_seed"], device)
        clock.mark("task_model")
        dists = job["distributions"]
        # Pipelining (set i+1 prepared while the candidate runs set i) holds two
        # sets of reference outputs (and two exchange regions); above 1 GB per
        # set memory matters more.
        limit = int(os.environ.get("KERNELRL_REF_PIPELINE_MAX_BYTES", 1 << 30))
        big = False  # decided by set 0's outputs

        def prepare(i):
            nonlocal big
            dist = dists[i % len(dists)]
            with torch.no_grad():
                xs = inputs_lib.make_inputs(mod, job["seeds"][i], dist, device)
                clock.mark("inputs")
                outs = inputs_lib.flatten_outputs(model(*xs))
                clock.mark("forward")
                if dist != "task" and any(isinstance(o, torch.Tensor) and o.is_floating_point()
                                          and bool(torch.isnan(o).any()) for o in outs):
                    # The task's math is undefined on this distribution: use its own.
                    dist = "task"
                    xs = inputs_lib.make_inputs(mod, job["seeds"][i], dist, device)
                    outs = inputs_lib.flatten_outputs(model(*xs))
            pending[i] = (dist, inputs_lib.fingerprint(xs), [o.detach() if isinstance(o, torch.Tensor) else o
                                                              for o in outs])
            del xs
            clock.mark("fingerprint")
            if i == 0:
                big = sum(o.nbytes for o in pending[0][2] if isinstance(o, torch.Tensor)) > limit
            go = {"type": "go", "set": i, "dist": dist}
            exchange = outputs.offer(pending[i][2], i, 1 if big else 2)
            if exchange:
                go["exchange"] = exchange
            clock.mark("exchange")
            _send(to_cand, go)

        prepare(0)
        for i in range(n):
            if i + 1 < n and not big:
                prepare(i + 1)
            msg = None
            while True:
                msg = reader.read(timeout=job["wall_seconds"] + 10)
                if msg is None:
                    break
                result["candidate_flags"] = sorted(set(result["candidate_flags"]) | set(msg.get("flags", [])))
                if msg.get("detail") and msg.get("type") != "log":
                    result["details"].append(msg["detail"])
                if msg.get("type") in ("set", "error", "done"):
                    break
                if msg.get("type") == "log":
                    result.setdefault("log", []).append((msg.get("contain") or msg.get("text") or "")[-2000:])
            clock.mark("wait_candidate")
            if msg is None:
                break
            if msg["type"] == "error":
                result["candidate_timeline"] = msg.get("timeline")
                result["candidate_exchange"] = str(msg.get("exchange", ""))[:300]
                result["candidate_error"] = {k: msg.get(k) for k in ("kind", "stage", "message", "audit", "torch_ops")}
                break
            if msg["type"] == "done" or msg.get("set") != i:
                result["details"].append(f"candidate stopped before set {i}")
                break
            dist, fp, refs = pending.pop(i)
            prepare_after = big and i + 1 < n  # not pipelined: set i+1 once set i is checked
            result["forward_ms"].append(msg.get("forward_ms", 0.0))
            entry = {"set": i, "dist": dist, "ok": True, "detail": ""}
            if msg.get("fp") != fp:
                result["fp_mismatch"] = True
                entry.update(ok=False, detail="candidate process saw different inputs (RNG or harness tampered)")
            elif msg.get("mutated"):
                result["mutated"] = True
                entry.update(ok=False, detail="forward modified its inputs")
            else:
                metas = msg.get("outputs", [])
                if len(metas) != len(refs):
                    entry.update(ok=False, detail=f"returned {len(metas)} outputs, expected {len(refs)}")
                for j, (ref, meta) in enumerate(zip(refs, metas)):
                    if not entry["ok"]:
                        break
                    why = compare(ref, meta if isinstance(meta, dict) else {}, outputs, j, i, atol, rtol) \
                        if isinstance(ref, torch.Tensor) else None
                    if why:
                        entry.update(ok=False, detail=f"set {i} ({dist}) output {j}: {why}")
                outputs.poison(i)
            clock.mark("compare")
            result["sets"].append(entry)
            if not entry["ok"]:
                break
            if prepare_after:
                del refs
                prepare(i + 1)
        else:
            if job.get("profile"):
                # Every set passed: the candidate times itself; we answer its re-checks.
                # Verify-era blocks go back to the driver first: the timing process
                # needs room for 6 GB KernelBench tensors.
                refs = None
                if device == "cuda":
                    torch.cuda.empty_cache()
                def recheck_compare(ref, meta, j):
                    try:
                        return compare(ref, meta, outputs, j, Outputs.RECHECK, atol, rtol)
                    finally:
                        outputs.poison(Outputs.RECHECK)

                profiling.serve_reference(job, mod, model, device, lambda m: _send(to_cand, m), reader,
                                          recheck_compare, result)
                clock.mark("profile")
            _send(to_cand, {"type": "stop"})
            msg = reader.read(timeout=30) if result["candidate_error"] is None else None
            clock.mark("stop")
            if msg is not None:
                result["candidate_timeline"] = msg.get("timeline")
                result["candidate_exchange"] = str(msg.get("exchange", ""))[:300]
                result["candidate_flags"] = sorted(set(result["candidate_flags"]) | set(msg.get("flags", [])))
                if msg.get("type") == "done":
                    result["candidate_done"] = True
                elif msg.get("type") == "error":
                    result["candidate_error"] = {k: msg.get(k) for k in ("kind", "stage", "message", "audit", "torch_ops")}
    except Exception:  # noqa: BLE001 - a failing reference is our fault, not the candidate's
        result["ref_error"] = traceback.format_exc(limit=6)[-3000:]
    _send(to_cand, {"type": "stop"})
    try:
        outputs.release()
    except Exception:  # noqa: BLE001 - the process ends next; the verdict is decided
        pass
    result["exchange"] = outputs.note
    result["reference_ms"] = (time.perf_counter() - t_start) * 1e3
    result["timeline"] = clock.report()
    protocol.send(result_fd, result)
    return 0
