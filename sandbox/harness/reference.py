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


def compare(ref, meta, exchange_dir, device, atol, rtol, chunk=1 << 28):
    """None if the candidate output matches, else a one-line reason."""
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
    name = meta.get("file", "")
    path = os.path.join(exchange_dir, os.path.basename(name))
    if not name or not os.path.isfile(path) or os.path.getsize(path) != ref.numel() * ref.element_size():
        return "output bytes missing or of the wrong size"
    # Chunk by chunk: a 6.4 GB output compared whole needs ~5 such buffers of
    # temporaries on the GPU, which the candidate process shares.
    host = torch.from_file(path, shared=False, size=ref.numel(), dtype=ref.dtype)
    os.unlink(path)
    flat_ref = ref.reshape(-1)
    floating = ref.is_floating_point() or ref.is_complex()
    for s in range(0, flat_ref.numel(), chunk):
        r = flat_ref[s:s + chunk]
        got = host[s:s + chunk].to(device)
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


def run(job, to_cand, from_cand, result_fd):
    device = job["device"]
    atol, rtol = job["atol"], job["rtol"]
    n = len(job["seeds"])
    result = {"sets": [], "candidate_flags": [], "candidate_error": None, "candidate_done": False,
              "fp_mismatch": False, "mutated": False, "ref_error": None, "details": [], "forward_ms": []}
    reader = protocol.LineReader(from_cand)
    pending = {}
    t_start = time.perf_counter()
    try:
        if device == "cuda":
            torch.cuda.set_device(0)
        mod = loader.load_module(job["reference_model"], "kernelrl_task_model")
        model, _ = inputs_lib.make_model(mod, job["init_seed"], device)
        dists = job["distributions"]

        def prepare(i):
            dist = dists[i % len(dists)]
            with torch.no_grad():
                xs = inputs_lib.make_inputs(mod, job["seeds"][i], dist, device)
                outs = inputs_lib.flatten_outputs(model(*xs))
                if dist != "task" and any(isinstance(o, torch.Tensor) and o.is_floating_point()
                                          and bool(torch.isnan(o).any()) for o in outs):
                    # The task's math is undefined on this distribution: use its own.
                    dist = "task"
                    xs = inputs_lib.make_inputs(mod, job["seeds"][i], dist, device)
                    outs = inputs_lib.flatten_outputs(model(*xs))
            pending[i] = (dist, inputs_lib.fingerprint(xs), [o.detach() if isinstance(o, torch.Tensor) else o
                                                              for o in outs])
            del xs
            _send(to_cand, {"type": "go", "set": i, "dist": dist})

        prepare(0)
        # Pipelining (set i+1 prepared while the candidate runs set i) holds two
        # sets of reference outputs; above 1 GB per set memory matters more.
        limit = int(os.environ.get("KERNELRL_REF_PIPELINE_MAX_BYTES", 1 << 30))
        big = sum(o.nbytes for o in pending[0][2] if isinstance(o, torch.Tensor)) > limit
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
            if msg is None:
                break
            if msg["type"] == "error":
                result["candidate_error"] = {k: msg.get(k) for k in ("kind", "stage", "message", "audit", "torch_ops")}
                break
            if msg["type"] == "done" or msg.get("set") != i:
                result["details"].append(f"candidate stopped before set {i}")
                break
            dist, fp, refs = pending.pop(i)
            if big and i + 1 < n:
                prepare_after = True
            else:
                prepare_after = False
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
                    why = compare(ref, meta, job["exchange_dir"], device, atol, rtol) \
                        if isinstance(ref, torch.Tensor) else None
                    if why:
                        entry.update(ok=False, detail=f"set {i} ({dist}) output {j}: {why}")
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
                profiling.serve_reference(job, mod, model, device, lambda m: _send(to_cand, m), reader,
                                          compare, result)
            _send(to_cand, {"type": "stop"})
            msg = reader.read(timeout=30) if result["candidate_error"] is None else None
            if msg is not None:
                result["candidate_flags"] = sorted(set(result["candidate_flags"]) | set(msg.get("flags", [])))
                if msg.get("type") == "done":
                    result["candidate_done"] = True
                elif msg.get("type") == "error":
                    result["candidate_error"] = {k: msg.get(k) for k in ("kind", "stage", "message", "audit", "torch_ops")}
    except Exception:  # noqa: BLE001 - a failing reference is our fault, not the candidate's
        result["ref_error"] = traceback.format_exc(limit=6)[-3000:]
    _send(to_cand, {"type": "stop"})
    result["reference_ms"] = (time.perf_counter() - t_start) * 1e3
    protocol.send(result_fd, result)
    return 0
