"""The candidate process: an executor. pid 1 of its own namespaces, forked
from the zygote. After it imported model_new.py everything in this process is
the candidate's (its Python can reach any object, its native code can write
any byte), so nothing here decides anything: it answers

    {"type": "call", "id": j, "inputs": [...], "exchange": {...}}

with one identical code path for every call (verify, warm-up, timed and
re-checked calls look the same from here): view the inputs the reference
process writes into memory it owns (after its clock starts), open the timing
window, run ModelNew.forward under the guards, close the window after a
device-wide sync, say where the outputs are (the reference copies them
itself: wire.py), reply with the in-process timing figures (evidence the
trusted side bounds with its own clock). Which calls exist, their inputs, which are timed or re-checked,
how many there are and when to stop are decided by the reference process
(sandbox/harness/reference.py), which never tells.

Baseline jobs (job["baseline"] "eager" or "compiled", set by the worker
only, Evaluator::MeasureBaseline): the same executor with the task's own
Model, or torch.compile(Model), in place of ModelNew, so baselines are timed
through exactly this call path. Only the candidate policing is off there (the
torch-op, thread, audit and patch guards: the reference is all torch ops and
torch.compile starts compilers); the window, the exchange and the replies
are the same code.
"""
import bisect
import os
import sys
import time
import traceback

import torch

import contain
import graphs
import guards
import inputs as inputs_lib
import kernelrl
import loader
import precision
import profiling
import protocol
import verify_cuda
import wire

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


class Ranges:
    """Address ranges [a, b), merged once: overlap queries in log time (a
    block's every output against its every input; pairwise, a 511-forward
    block took ~20 ms)."""

    def __init__(self, ranges):
        merged = []
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def overlaps(self, lo, hi):
        i = bisect.bisect_left(self.starts, hi)  # the ranges starting before hi: [0, i)
        return i > 0 and self.ends[i - 1] > lo


def read_go(reader):
    """The reference's next message is its "go" (anything else ends the loop)."""
    go = reader.read()
    return go is not None and go.get("type") == "go"


def poison_allocator(device, nbytes):
    """Fill blocks the caching allocator will hand out next with NaN, so an
    output the kernel never wrote reads NaN instead of stale data."""
    if device != "cuda" or nbytes <= 0:
        return
    p = torch.full((nbytes // 4 + 1,), float("nan"), device=device)
    del p


def run(job, cont, to_ref, from_ref, xsock=-1):
    clock = protocol.Timeline(job.get("t0_mono"))  # diagnostics only: the candidate could lie
    device = job["device"]
    baseline = job.get("baseline") or ""  # "", "eager" or "compiled" (the worker's job, never the candidate's)
    policing = not baseline
    flags = set()
    guard = audit = threads = None
    send = lambda m: protocol.send(to_ref, m)  # noqa: E731
    reader = protocol.LineReader(from_ref)
    stage = "setup"
    exchange = wire.CandidateExchange(xsock, job["exchange_dir"], device)
    try:
        # One intra-op thread: harness-side CPU work stays on this thread, so
        # any new thread during import/forward is the candidate's.
        torch.set_num_threads(1)
        if device == "cuda":
            profiling.inject_recorder(job)  # CUPTI from cuInit on (profile jobs only)
            torch.cuda.set_device(0)
            # torch's ops on this thread's per-thread default stream, where the
            # candidate's kernels (nvcc --default-stream per-thread) launch: one
            # stream, which a CUDA graph can capture (graphs.py).
            torch.cuda.set_stream(torch.cuda.ExternalStream(graphs.CUDA_STREAM_PER_THREAD))
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            verify_cuda.load(job.get("verify_cuda_lib", ""))
            clock.mark("cuda_init")
        # TF32 off unless a tf32-policy baseline asks (the worker's job, never
        # the candidate's): PyTorch's own defaults differ for cuBLAS and cuDNN.
        precision.set_tf32(bool(baseline) and bool(job.get("baseline_tf32")))
        timer = profiling.CallTimer(job)  # CUPTI window + events (+ the CPU cache flush on CPU)
        if job.get("profile"):
            send({"type": "log", "text": f"profile: {timer.note}"})
        clock.mark("recorder")
        ref_mod = loader.load_module(job["public_model"], "kernelrl_task_model")
        ref_model, init = inputs_lib.make_model(ref_mod, job["init_seed"], device)
        state = ref_model.state_dict()
        del ref_model
        clock.mark("task_model")
        loader.prepare_artifacts(job["layout"], job["artifact_dir"])
        audit = guards.AuditGuard([job["scratch_dir"], job["exchange_dir"]])
        if policing:
            audit.install()
        if job["isolation"].get("seccomp"):
            pol = contain.make_policy({}, seccomp_profile=contain.KR_SECCOMP_CANDIDATE)
            _, log = cont.phase(pol, 3)
            send({"type": "log", "contain": log})
        threads = guards.ThreadGuard()
        if policing:
            threads.install()
        snapshot = guards.PatchSnapshot(extra_modules=[kernelrl, graphs, guards, inputs_lib, protocol, loader,
                                                       profiling, verify_cuda, wire] + profiling.timing_modules(job))
        threads_base = guards.thread_count()
        allowance = int(job.get("profile_thread_allowance") or 0)  # CUPTI/NVML threads, calibrated at start
        clock.mark("guards")
        # Our code so far; the candidate's from the import on, which waits for the reference's
        # word: a job that profiles imports only in its turn (sandbox/gpu_turns.h). Idle until
        # then, our GPU work finished: another job's clock may run meanwhile.
        if device == "cuda":
            torch.cuda.synchronize()
        send({"type": "idle"})
        start = reader.read()
        clock.mark("start_wait")
        if not start or start.get("type") != "start":
            send({"type": "finished", "flags": sorted(flags), "timeline": clock.report(),
                  "exchange": exchange.status(), "report": {}})
            return 0
        stage = "import"
        audit.armed = True
        sys.path.insert(0, job["workspace_dir"])
        if baseline:
            model_class = ref_mod.Model  # the task's own: the eager / torch.compile baseline
        else:
            model_class = loader.load_module(os.path.join(job["workspace_dir"], "model_new.py"), "model_new").ModelNew
        torch.manual_seed(job["init_seed"])
        model = model_class(*init)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            send({"type": "log", "text": f"load_state_dict: missing={list(missing)[:8]} unexpected={list(unexpected)[:8]}"})
        model = model.to(device).eval()
        if baseline == "compiled":
            # Default mode, compiled on the first call (a verify call), in this
            # process (no compile worker pool); the cache is the zygote's
            # (contain.candidate_env), so a task compiled before is not compiled again.
            os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
            model = torch.compile(model)
        if device == "cuda":
            torch.cuda.synchronize()
        patched = snapshot.changed() if policing else []
        if patched:
            flags.add("monkey_patch")
            send({"type": "flags", "flags": sorted(flags), "detail": "patched: " + ", ".join(patched[:5])})
        clock.mark("model_new")
        stage = "forward"
        graph_blocks = graphs.GraphBlocks()
        bell = None
        while True:
            msg = reader.read()
            clock.mark("wait")
            if msg is None or msg.get("type") != "call":
                break
            # ---- one block: the only code path forward ever runs on ----
            # Before the reference's clock: map the area, view this block's
            # rows (poison until the reference writes them after its clock
            # starts), open the recorder's window, say "armed".
            exchange.release_held()  # the reference is done with the last block's outputs
            exchange.accept(msg.get("exchange"))
            rows = [exchange.inputs(k, descs) for k, descs in enumerate(msg.get("forwards") or [])]
            clock.mark("arm_rows")
            to_device = exchange.needs_device_copy()
            guard = guards.TorchOpGuard() if policing else guards.NoGuard()
            # A graph block (the reference asks): captured here, before the
            # clock, on this block's rows; replayed inside it.
            replay, still_active = None, True
            if msg.get("graph") and device == "cuda" and not to_device:
                replay, still_active = graph_blocks.get(exchange, msg.get("forwards"), model, rows, guard)
            clock.mark("arm_graph")
            timer.open()  # on CUDA it also runs a little work here: the GPU is on this context when the clock starts
            clock.mark("arm_open")
            armed = {"type": "armed", "id": msg.get("id"), "held_segments": exchange.held_segments()}
            clock.mark("arm_segments")
            if replay is not None:  # where the replay leaves its outputs is known now: the reference plans its copy
                armed.update(outputs=replay.metas, segments=replay.segments)
            send(armed)
            if msg.get("doorbell") and device == "cuda" and bell is None:
                bell = protocol.Doorbell(os.path.join(job["exchange_dir"], protocol.Doorbell.FILE))
            seq = int(msg.get("id") or 0) + 1
            # Rung: "go" is on the pipe (the reference writes it first) and
            # is read after the block, outside the clock.
            go_pending = bell is not None and bell.wait(protocol.Doorbell.GO, seq, protocol.CLOCK_SPIN_S, from_ref)
            if not go_pending and not read_go(reader):
                break
            woke = time.monotonic()
            clock.mark("go_wait")
            # ---- inside the reference's clock ----
            t0 = timer.start()
            if to_device:
                rows = [[x.to(device) if isinstance(x, torch.Tensor) else x for x in xs] for xs in rows]
            if replay is not None:
                replay.graph.replay()  # the block's forwards, as captured
                outs, done = replay.outs, {}
            else:
                outs = []
                guarded = guards.Guarded(guard)
                with torch.no_grad(), guarded:
                    for xs in rows:
                        outs.append(inputs_lib.flatten_outputs(model(*xs)))
                still_active = guarded.active
                if device == "cuda":
                    # Every forward's work is done, whatever stream it ran on,
                    # before the reference reads the outputs (still inside the clock).
                    torch.cuda.synchronize()
                segments = wire.Segments()
                done = {"outputs": [wire.export_outputs(flat, k, exchange, segments) for k, flat in enumerate(outs)],
                        "segments": segments.handles}
            timer.stop(t0)  # device-wide sync: the outputs are where "done" says
            protocol.send(to_ref, {"type": "done", "id": msg.get("id"), "woke": woke, "sent": time.monotonic(),
                                   **done})
            if bell is not None:
                bell.ring(protocol.Doorbell.DONE, seq)
            if go_pending and not read_go(reader):
                break
            # ---- after the reference's clock: evidence and checks ----
            sample = timer.close(len(rows))
            clock.mark("forward")
            detail = []
            if guard.violations:
                flags.add("torch_op_in_forward")
                detail.append("torch ops: " + ", ".join(sorted(set(guard.violations))[:5]))
            if not still_active:
                flags.add("guard_removed")
            ranges = Ranges([storage_range(x) for xs in rows for x in xs if isinstance(x, torch.Tensor)]
                            if policing else [])
            for flat in outs:
                for o in flat:
                    if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
                        flags.add("output_tensor_subclass")
                    if type(o) is torch.Tensor and ranges.starts:  # a task's Model may return a view
                        if ranges.overlaps(*storage_range(o)):
                            flags.add("output_aliases_input")
            send({"type": "result", "id": msg.get("id"), "sample": sample,
                  "flags": sorted(flags), "detail": "; ".join(detail),
                  "graph": "replayed" if replay is not None else graph_blocks.off_reason})
            # The exchange keeps the outputs until the next call (the reference
            # re-reads and poisons them after this block); the loop variables
            # must not keep them into the next block's clock.
            flat = o = None
            del outs, rows
            if policing and (guards.thread_count() > threads_base + allowance or threads.attempts):
                flags.add("threads_spawned")
            patched = snapshot.changed() if policing else []
            if patched and "monkey_patch" not in flags:
                flags.add("monkey_patch")
                send({"type": "flags", "flags": sorted(flags), "detail": "patched: " + ", ".join(patched[:5])})
            if device == "cuda" and msg.get("release"):
                torch.cuda.empty_cache()  # room for the reference's next multi-GB set
            poison_allocator(device, int(msg.get("poison_bytes") or 0))
            send({"type": "ready", "flags": sorted(flags)})  # the next block starts after this
            clock.mark("checks")
        send({"type": "finished", "flags": sorted(flags), "timeline": clock.report(), "exchange": exchange.status(),
              "report": timer.report()})
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
                  "message": tb[-3000:], "timeline": clock.report(), "exchange": exchange.status()})
        except OSError:
            pass
        sys.stderr.write(tb)
        return 3
