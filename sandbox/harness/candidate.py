"""The candidate process: pid 1 of its own namespaces, forked from the zygote.
It never sees reference outputs: it builds the same secret input sets as the
reference process, runs ModelNew.forward under the guards, writes its outputs
to the exchange directory and tells the reference process where they are.
Everything it reports about itself is only evidence for flags; correctness is
decided by the reference process."""
import os
import sys
import time
import traceback

import torch

import contain
import guards
import inputs as inputs_lib
import kernelrl
import loader
import profiling
import protocol
import verify_cuda

CUDA_MARKERS = ("CUDA error", "illegal memory access", "unspecified launch failure",
                "device-side assert", "misaligned address", "an illegal instruction",
                "cudaError", "CUBLAS_STATUS", "CUDNN_STATUS", "AcceleratorError")


def classify(exc, guard, audit, threads=None):
    if audit is not None and audit.violations:
        return "violation"
    if threads is not None and threads.attempts:
        return "threads"
    if isinstance(exc, guards.TorchOpForbidden) or (guard is not None and guard.violations):
        return "torch_op"
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return "oom"
    text = f"{type(exc).__name__}: {exc}"
    if any(m in text for m in CUDA_MARKERS) or type(exc).__name__ == "AcceleratorError":
        return "cuda"
    if isinstance(exc, kernelrl.KernelError):
        return "kernel_error"
    return "exception"


def storage_range(t):
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def poison_allocator(device, nbytes):
    """Fill blocks the caching allocator will hand out next with NaN, so an
    output the kernel never wrote reads NaN instead of stale data."""
    if device != "cuda" or nbytes <= 0:
        return
    p = torch.full((nbytes // 4 + 1,), float("nan"), device=device)
    del p


class ExchangeSlots:
    """The reference process's device allocation, mapped here once (its fd
    arrives on the exchange socket with the first go message that offers
    it); go messages say which slot each output goes to."""

    def __init__(self, xsock, device="cuda"):
        self.device = device  # where the exchange memory lives (tests fake it on the CPU)
        # The socket object is made now, before the audit hook that forbids
        # socket creation is installed; receiving on it raises no audit event.
        try:
            self.sock = verify_cuda.fd_socket(xsock) if xsock >= 0 else None
        except OSError:
            self.sock = None
        self.ex = None
        self.slots = None
        self.first = None  # set 0's slots: region 0, where profile re-checks go
        self.note = ""

    def accept(self, offer):
        """Takes a go message's "exchange" entry; returns a log line or ""."""
        self.slots = None
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
        self.slots = offer.get("slots") if isinstance(offer.get("slots"), list) else None
        if self.first is None:
            self.first = self.slots
        return ""

    def status(self):
        return self.note or ("gpu" if self.ex is not None else "files")

    def for_rechecks(self):
        self.slots = self.first

    def put(self, j, o):
        """Writes output j into its slot; False when it has none or does not fit."""
        slot = self.slots[j] if self.slots is not None and j < len(self.slots) else None
        if not slot or o.device.type != self.device or o.nbytes != slot[1]:
            return False
        self.ex.write(int(slot[0]), o.detach().contiguous())
        return True


def export_outputs(flat, exchange_dir, prefix, slots=None):
    """Hands each plain strided tensor's bytes to the reference process: into
    its device slot when it has one, else to a file in the exchange
    directory; returns the metadata the reference checks first."""
    metas = []
    for j, o in enumerate(flat):
        meta = {"type": type(o).__name__}
        if isinstance(o, torch.Tensor):
            meta.update(shape=list(o.shape), dtype=str(o.dtype), device=o.device.type, layout=str(o.layout))
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


def run(job, cont, to_ref, from_ref, xsock=-1):
    t_start = time.monotonic()
    clock = protocol.Timeline(job.get("t0_mono"))  # diagnostics only: the candidate could lie
    device = job["device"]
    flags = set()
    guard = None
    audit = None
    threads = None
    send = lambda m: protocol.send(to_ref, m)  # noqa: E731
    reader = protocol.LineReader(from_ref)
    stage = "setup"
    slots = ExchangeSlots(xsock)
    try:
        # One intra-op thread: harness-side CPU work stays on this thread, so
        # any new thread during import/forward is the candidate's.
        torch.set_num_threads(1)
        if device == "cuda":
            profiling.inject_recorder(job)  # CUPTI from cuInit on (profile jobs only)
            torch.cuda.set_device(0)
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            verify_cuda.load(job.get("verify_cuda_lib", ""))
            clock.mark("cuda_init")
            recorder = profiling.warm_recorder(job)
            if job.get("profile"):
                send({"type": "log", "text": f"profile: {recorder}"})
            clock.mark("recorder")
        ref_mod = loader.load_module(job["public_model"], "kernelrl_task_model")
        ref_model, init = inputs_lib.make_model(ref_mod, job["init_seed"], device)
        state = ref_model.state_dict()
        del ref_model
        clock.mark("task_model")
        loader.prepare_artifacts(job["layout"], job["artifact_dir"])
        audit = guards.AuditGuard([job["scratch_dir"], job["exchange_dir"]])
        audit.install()
        if job["isolation"].get("seccomp"):
            pol = contain.make_policy({}, seccomp_profile=contain.KR_SECCOMP_CANDIDATE)
            failures, log = cont.phase(pol, 3)
            send({"type": "log", "contain": log})
        threads = guards.ThreadGuard()
        threads.install()
        snapshot = guards.PatchSnapshot(extra_modules=[kernelrl, guards, inputs_lib, protocol, loader, profiling,
                                                       verify_cuda]
                                        + profiling.timing_modules(job))
        threads_base = guards.thread_count()
        clock.mark("guards")
        stage = "import"
        audit.armed = True
        sys.path.insert(0, job["workspace_dir"])
        mod = loader.load_module(os.path.join(job["workspace_dir"], "model_new.py"), "model_new")
        torch.manual_seed(job["init_seed"])
        model = mod.ModelNew(*init)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            send({"type": "log", "text": f"load_state_dict: missing={list(missing)[:8]} unexpected={list(unexpected)[:8]}"})
        model = model.to(device).eval()
        if device == "cuda":
            torch.cuda.synchronize()
        patched = snapshot.changed()
        if patched:
            flags.add("monkey_patch")
            send({"type": "flags", "flags": sorted(flags), "detail": "patched: " + ", ".join(patched[:5])})
        clock.mark("model_new")
        stage = "forward"
        index = 0
        prev_inputs = None
        while True:
            msg = reader.read()
            clock.mark("wait")
            if msg is not None and msg.get("type") == "profile" and job.get("profile"):
                # Every set passed (the reference process decided): time it.
                stage = "profile"
                slots.for_rechecks()
                audits = len(audit.violations)
                deadline = t_start + float(job["wall_seconds"]) * 0.85
                reply = profiling.run_candidate(
                    job, model, ref_mod, device, send, reader,
                    lambda flat, prefix: export_outputs(flat, job["exchange_dir"], prefix, slots), deadline)
                if device == "cuda":
                    torch.cuda.synchronize()  # a sticky CUDA error from a timed call surfaces here
                if len(audit.violations) > audits:
                    raise PermissionError("sandbox: " + audit.violations[-1])
                allowance = int(job.get("profile_thread_allowance") or 0)  # CUPTI/NVML, calibrated at start
                if guards.thread_count() > threads_base + allowance or threads.attempts:
                    flags.add("threads_spawned")
                patched = snapshot.changed()
                if patched:
                    flags.add("monkey_patch")
                    reply["detail"] = "patched while profiled: " + ", ".join(patched[:5])
                reply["flags"] = sorted(flags)
                send(reply)
                clock.mark("profile")
                continue
            if msg is None or msg.get("type") != "go":
                break
            i, dist = msg["set"], msg["dist"]
            note = slots.accept(msg.get("exchange"))
            if note:
                send({"type": "log", "text": note})
            xs = inputs_lib.make_inputs(ref_mod, job["seeds"][i], dist, device)
            clock.mark("inputs")
            fp = inputs_lib.fingerprint(xs)
            clock.mark("fingerprint")
            # Same buffers, new values: a cache keyed by pointer or shape
            # returns the previous set's answer and fails.
            if prev_inputs is not None and len(prev_inputs) == len(xs):
                for k, (old, new) in enumerate(zip(prev_inputs, xs)):
                    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and \
                            old.shape == new.shape and old.dtype == new.dtype:
                        old.copy_(new)
                        xs[k] = old
            tensors = [x for x in xs if isinstance(x, torch.Tensor)]
            # Exact digest instead of a clone: no second copy of multi-GB inputs.
            # The values are those fp digested (copied into the old buffers).
            before = [f for x, f in zip(xs, fp) if isinstance(x, torch.Tensor)]
            poison_allocator(device, sum(x.nbytes for x in tensors) + (1 << 20))
            if device == "cuda":
                torch.cuda.synchronize()
            clock.mark("reuse_poison")
            guard = guards.TorchOpGuard()
            t0 = time.perf_counter()
            with torch.no_grad():
                guard.__enter__()
                try:
                    out = model(*xs)
                finally:
                    still_active = guards.guard_still_active(guard)
                    if still_active:
                        guard.__exit__(None, None, None)
                    else:
                        guards.clear_dispatch_modes()
            forward_ms = (time.perf_counter() - t0) * 1e3
            clock.mark("forward")
            detail = []
            if guard.violations:
                flags.add("torch_op_in_forward")
                detail.append("torch ops: " + ", ".join(sorted(set(guard.violations))[:5]))
            if not still_active:
                flags.add("guard_removed")
            flat = inputs_lib.flatten_outputs(out)
            for o in flat:
                if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
                    flags.add("output_tensor_subclass")
            plain = [o for o in flat if type(o) is torch.Tensor]
            if device == "cuda":
                # Read the outputs on the current stream before any device-wide
                # sync: work still running on a side stream shows up as a change.
                # An exact digest, not a clone: no second copy of a 6.4 GB output.
                snap = inputs_lib.fingerprint(plain)
                torch.cuda.synchronize()
                if inputs_lib.fingerprint(plain) != snap:
                    flags.add("async_side_stream")
            clock.mark("output_digests")
            mutated = inputs_lib.fingerprint(tensors) != before
            ranges = [storage_range(x) for x in tensors]
            for o in plain:
                lo, hi = storage_range(o)
                if any(lo < b and a < hi for a, b in ranges):
                    flags.add("output_aliases_input")
            if guards.thread_count() > threads_base or threads.attempts:
                flags.add("threads_spawned")
            patched = snapshot.changed()
            if patched:
                flags.add("monkey_patch")
                detail.append("patched: " + ", ".join(patched[:5]))
            clock.mark("checks")
            metas = export_outputs(flat, job["exchange_dir"], f"{i}", slots)
            clock.mark("export")
            send({"type": "set", "set": i, "fp": fp, "outputs": metas, "mutated": mutated,
                  "flags": sorted(flags), "detail": "; ".join(detail), "forward_ms": forward_ms})
            prev_inputs = xs
            del out, flat, plain, tensors
            if device == "cuda":
                # Hand this set's freed blocks back to the driver: the reference
                # process needs the room for the next 6 GB tensors.
                torch.cuda.empty_cache()
            clock.mark("release")
            index += 1
        send({"type": "done", "flags": sorted(flags), "timeline": clock.report(), "exchange": slots.status()})
        return 0
    except BaseException as exc:  # noqa: BLE001 - everything the candidate raises is a verdict
        kind = classify(exc, guard, audit, threads)
        if kind == "torch_op":
            flags.add("torch_op_in_forward")
        if kind == "threads":
            flags.add("threads_spawned")
        tb = traceback.format_exc(limit=6)
        try:
            send({"type": "error", "kind": kind, "stage": stage, "flags": sorted(flags),
                  "audit": audit.violations[:5] if audit else [],
                  "torch_ops": sorted(set(guard.violations))[:5] if guard else [],
                  "message": tb[-3000:], "timeline": clock.report(), "exchange": slots.status()})
        except OSError:
            pass
        sys.stderr.write(tb)
        return 3
