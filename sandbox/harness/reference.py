"""The reference process: trusted task code only, and the driver of every
call the candidate process (an executor, sandbox/harness/candidate.py) makes.

It draws the secret seeds itself (after the fork: no other process ever holds
them), builds each input set, runs the frozen Model, writes the call's inputs
into memory it owns just before the call, and reads the outputs right after.
Verify calls are all compared; then, on profiled jobs, it runs the timing
protocol (profiling.run_profile): warm-up and timed calls on fresh inputs,
each call's re-check decided only after the call has returned, the counts,
convergence and budget, its own clock around every call. The candidate sees
the same message for every call and nothing else. Its result is the
correctness half of the verdict and the trusted half of the measurement."""
import secrets
import time
import traceback

import torch

import inputs as inputs_lib
import loader
import profiling
import protocol
import verify_cuda
import wire


def compare(ref, meta, slots, j, region, atol, rtol, chunk=1 << 28):
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
    got_all, why = slots.read_output(ref, meta, j, region)
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


def _rms(ref):
    """Root mean square of a floating reference output (finite elements), else 0."""
    if not ref.is_floating_point() or ref.numel() == 0:
        return 0.0
    flat, total = ref.reshape(-1), 0.0
    for s in range(0, flat.numel(), 1 << 26):  # chunks: no output-sized temporary on the GPU
        c = torch.nan_to_num(flat[s:s + (1 << 26)], nan=0.0, posinf=0.0, neginf=0.0)
        total += float(torch.linalg.vector_norm(c, dtype=torch.float64)) ** 2
    return (total / flat.numel()) ** 0.5


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


class CandidateGone(Exception):
    """The candidate process stopped answering, or reported an error."""


class Driver:
    """Sends calls to the executor and collects its replies; every call goes
    through `call` (start + finish), whatever the caller will do with it."""

    def __init__(self, job, to_cand, from_cand, slots, result):
        self.job, self.to_cand, self.slots, self.result = job, to_cand, slots, result
        self.reader = protocol.LineReader(from_cand)
        self.calls = 0
        self.poison_bytes = 1 << 20
        self.expect_ready = False  # the executor says "ready" once its post-call checks are done

    def start(self, xs, refs):
        """Writes a call's inputs and sends it; returns the call record. The
        outside clock (call["outside_us"]) runs from the send to the reply; the
        inputs reach shared memory only just before the send."""
        if self.expect_ready:
            self._read_until("ready")
            self.expect_ready = False
        j = self.calls
        self.calls += 1
        self.slots.plan(xs, refs)
        region = self.slots.region_for(xs, refs, j)
        descs = self.slots.write_inputs(xs, region, j)
        if xs and isinstance(xs[0], torch.Tensor) and xs[0].is_cuda:
            torch.cuda.synchronize()
        msg = {"type": "call", "id": j, "inputs": descs, "poison_bytes": self.poison_bytes,
               "release": self.job.get("release_each_call", False)}
        try:
            exchange = self.slots.offer(region)  # the first call hands over the slot fd
        except OSError as e:  # BrokenPipeError included: it exited (at import, say)
            raise CandidateGone(f"candidate gone ({type(e).__name__})") from e
        if exchange:
            msg["exchange"] = exchange
        t_send = time.perf_counter()
        if not _send(self.to_cand, msg):
            raise CandidateGone("candidate gone")
        return {"id": j, "region": region, "descs": descs, "xs": xs, "t_send": t_send}

    def _read_until(self, want, call_id=None):
        """The executor's next message of type `want` (logs and flags in between
        are recorded); raises CandidateGone on an error, EOF or anything else."""
        while True:
            msg = self.reader.read(timeout=self.job["wall_seconds"] + 10)
            if msg is None:
                raise CandidateGone("candidate stopped answering")
            kind = msg.get("type")
            self.result["candidate_flags"] = sorted(set(self.result["candidate_flags"]) | set(msg.get("flags", [])))
            if msg.get("detail") and kind != "log":
                self.result["details"].append(str(msg["detail"])[:500])
            if kind == "log":
                self.result.setdefault("log", []).append(str(msg.get("contain") or msg.get("text") or "")[-2000:])
                continue
            if kind == "error":
                self.result["candidate_timeline"] = msg.get("timeline")
                self.result["candidate_exchange"] = str(msg.get("exchange", ""))[:300]
                self.result["candidate_error"] = {k: msg.get(k) for k in
                                                  ("kind", "stage", "message", "audit", "torch_ops")}
                raise CandidateGone("candidate error")
            if kind == want and (call_id is None or msg.get("id") == call_id):
                return msg
            if kind == "flags":
                continue
            self.result["details"].append(f"candidate answered with {kind!r} where {want!r} was due")
            raise CandidateGone("protocol")

    def finish(self, call):
        """Waits for the call's reply; fills call["reply"], call["outside_us"]."""
        msg = self._read_until("result", call["id"])
        self.expect_ready = True
        call["outside_us"] = (time.perf_counter() - call["t_send"]) * 1e6
        call["reply"] = msg
        return msg

    def mutated(self, call):
        """Did the candidate write to the call's inputs? (trusted: our own copy vs our memory)"""
        for x, d in zip(call["xs"], call["descs"]):
            if isinstance(x, torch.Tensor) and isinstance(d, dict) and ("slot" in d or "file" in d):
                now = self.slots.read_input(d, call["region"])
                if not torch.equal(now.to(x.device), x.detach().contiguous().reshape(-1)):
                    return True
        return False

    def compare(self, call, refs, atol, rtol, scale_atol=False):
        """"" when every output of the call matches refs, else the reason.

        scale_atol: each output's atol is multiplied by max(1, rms of its
        reference) (job.atol_scaled_dists: the large-magnitude set)."""
        metas = call["reply"].get("outputs")
        if not isinstance(metas, list) or len(metas) != len(refs):
            return f"returned {len(metas) if isinstance(metas, list) else '?'} outputs, expected {len(refs)}"
        for j, (ref, meta) in enumerate(zip(refs, metas)):
            if not isinstance(ref, torch.Tensor):
                continue
            a = atol * max(1.0, _rms(ref)) if scale_atol else atol
            try:
                why = compare(ref, meta if isinstance(meta, dict) else {}, self.slots, j, call["region"], a, rtol)
            except torch.cuda.OutOfMemoryError:
                raise  # our memory, not the candidate's bytes: INFRA_ERROR, never a wrong answer
            except Exception as e:  # noqa: BLE001 - bytes the candidate wrote do not load
                why = f"unreadable output ({type(e).__name__}: {e})"[:300]
            if why:
                return f"output {j}: {why}"
        return ""

    def close(self, call):
        """Done with a call: its slots back to poison, its files removed."""
        self.slots.poison(call["region"])
        self.slots.drop_input_files(call["descs"])
        for m in call.get("reply", {}).get("outputs") or []:
            if isinstance(m, dict) and m.get("file"):
                self.slots.drop_input_files([m])

    def stop(self):
        """Ends the executor; returns its "done" message (evidence) or None."""
        _send(self.to_cand, {"type": "stop"})
        if self.result["candidate_error"] is not None:
            return None
        msg = self.reader.read(timeout=30)
        while msg is not None and msg.get("type") in ("log", "flags", "ready"):
            msg = self.reader.read(timeout=30)
        if msg is not None:
            self.result["candidate_timeline"] = msg.get("timeline")
            self.result["candidate_exchange"] = str(msg.get("exchange", ""))[:300]
            self.result["candidate_flags"] = sorted(set(self.result["candidate_flags"]) | set(msg.get("flags", [])))
            if msg.get("type") == "done":
                self.result["candidate_done"] = True
            elif msg.get("type") == "error":
                self.result["candidate_error"] = {k: msg.get(k) for k in ("kind", "stage", "message", "audit",
                                                                          "torch_ops")}
        return msg


def run(job, to_cand, from_cand, result_fd, xsock=-1):
    device = job["device"]
    atol, rtol = job["atol"], job["rtol"]
    scaled_dists = set(job.get("atol_scaled_dists") or [])
    n = int(job["num_sets"])
    # Secrets are drawn here, after the fork: the zygote (whose memory the
    # candidate process is a copy of) never holds them.
    seeds = [secrets.randbits(32) for _ in range(n)]
    profile_seed = secrets.randbits(63)
    result = {"sets": [], "candidate_flags": [], "candidate_error": None, "candidate_done": False,
              "mutated": False, "ref_error": None, "details": [], "forward_ms": []}
    t_start = time.perf_counter()
    clock = protocol.Timeline(job.get("t0_mono"))
    slots = wire.RefSlots(job["exchange_dir"], device, xsock)
    driver = Driver(job, to_cand, from_cand, slots, result)
    try:
        if device == "cpu":
            # One thread: idle OpenMP workers spinning here would take the
            # cores the executor's timed calls run on.
            torch.set_num_threads(1)
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

        def prepare(i):
            dist = dists[i % len(dists)]
            with torch.no_grad():
                xs = inputs_lib.make_inputs(mod, seeds[i], dist, device)
                outs = inputs_lib.flatten_outputs(model(*xs))
                if dist != "task" and any(isinstance(o, torch.Tensor) and o.is_floating_point()
                                          and bool(torch.isnan(o).any()) for o in outs):
                    # The task's math is undefined on this distribution: use its own.
                    dist = "task"
                    xs = inputs_lib.make_inputs(mod, seeds[i], dist, device)
                    outs = inputs_lib.flatten_outputs(model(*xs))
            refs = [o.detach() if isinstance(o, torch.Tensor) else o for o in outs]
            driver.poison_bytes = sum(o.nbytes for o in refs if isinstance(o, torch.Tensor)) + (1 << 20)
            clock.mark("prepare")
            return dist, xs, refs

        verified = True
        for i in range(n):
            dist, xs, refs = prepare(i)
            try:
                call = driver.start(xs, refs)
                t_call = time.perf_counter()
                driver.finish(call)
            except CandidateGone:
                if result["candidate_error"] is None and not result["details"]:
                    result["details"].append(f"candidate stopped before set {i}")
                verified = False
                break
            result["forward_ms"].append((time.perf_counter() - t_call) * 1e3)
            clock.mark("wait_candidate")
            entry = {"set": i, "dist": dist, "ok": True, "detail": ""}
            if driver.mutated(call):
                result["mutated"] = True
                entry.update(ok=False, detail="forward modified its inputs")
            else:
                why = driver.compare(call, refs, atol, rtol, scale_atol=dist in scaled_dists)
                if why:
                    entry.update(ok=False, detail=f"set {i} ({dist}) {why}")
            driver.close(call)
            del call, xs, refs
            clock.mark("compare")
            result["sets"].append(entry)
            if not entry["ok"]:
                verified = False
                break
        report = None
        if verified and job.get("profile"):
            if device == "cuda":
                torch.cuda.empty_cache()  # verify-era blocks: room for the timed sets
            report = profiling.run_profile(job, mod, model, driver, profile_seed, atol, rtol, result)
            clock.mark("profile")
        else:
            driver.stop()
        if report is not None:
            result["profile"]["candidate_report"] = report
    except Exception:  # noqa: BLE001 - a failing reference is our fault, not the candidate's
        result["ref_error"] = traceback.format_exc(limit=6)[-3000:]
    _send(to_cand, {"type": "stop"})
    try:
        slots.release()
    except Exception:  # noqa: BLE001 - the process ends next; the verdict is decided
        pass
    result["exchange"] = slots.note
    result["reference_ms"] = (time.perf_counter() - t_start) * 1e3
    result["timeline"] = clock.report()
    protocol.send(result_fd, result)
    return 0
