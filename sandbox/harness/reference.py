"""The reference process: trusted task code only, and the driver of every
block of forwards the executor (the candidate process, candidate.py) runs.

It reads the protocol from the trusted dir (the executor never sees it),
draws the secret seeds itself (after the fork: no other process ever holds
them), builds every input set, runs the frozen Model (and its float64 copy:
precision.py) for the expected outputs, and drives blocks:

    before the clock   stage the block's inputs in our own memory; flush the
                       L2; send the call (layout only); the executor views
                       its rows (poison until t0) and answers "armed"
    the clock          t0; one copy of the staged inputs into the exchange;
                       "go"; ... the executor runs its forwards, syncs, says
                       "done" and where each output is; we seal them there
                       (one read into a digest under a key of ours); t1
    after the clock    copy the outputs into our own memory (the snapshot)
                       under the same digest: a difference is a write after
                       the seal; compare every forward's outputs (snapshot)
                       with the Model's, and a secret sample of them with
                       the fp64 ones (computed now): one launch per output,
                       one wait per block (Driver.check);
                       check the inputs were not written and the outputs did
                       not change after the snapshot; poison

The copy and the read inside the clock are ours, so the candidate cannot
skip, defer or fuse them; the trusted figure of a block is (t1 - t0) /
forwards, less the least time they can take at the device's peak
bandwidth. Verify sets are blocks of one forward; the profile phase
(profiling.run_profile) runs blocks of several on fresh inputs, every one
compared. The result is the correctness half of the verdict and the
measurement the worker judges."""
import json
import os
import secrets
import time
import traceback

import torch

import inputs as inputs_lib
import loader
import precision
import profiling
import protocol
import verify_cuda
import wire

PROTOCOL_FILE = "protocol.json"  # written by the worker into the trusted dir
PROTOCOL_KEYS = ("num_sets", "distributions", "atol", "rtol", "atol_scaled_dists", "precision", "precision_ratio",
                 "precision_floor_units", "precision_max_hi_bytes", "profiler")


def structure(ref, meta, got):
    """None if output `got` (flat, from the snapshot) is a tensor of ref's
    kind, shape and device that the reference could read, else a one-line reason."""
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
    if ref.numel() and got is None:
        return "output not handed over: no segment or slot the reference could read"
    return None


def compare(ref, meta, got, atol, rtol, chunk=1 << 28):
    """None if output `got` (flat, from the snapshot) matches `ref` elementwise, else a one-line reason."""
    why = structure(ref, meta, got)
    if why or ref.numel() == 0:
        return why
    flat_ref = ref.reshape(-1)
    floating = ref.is_floating_point() or ref.is_complex()
    # Chunk by chunk: a 6.4 GB output compared whole with torch ops needs ~5
    # such buffers of temporaries on the GPU, which the candidate shares.
    for s in range(0, flat_ref.numel(), chunk):
        r = flat_ref[s:s + chunk]
        g = got[s:s + chunk].to(ref.device)
        if g.is_cuda and verify_cuda.available():
            bad, _, first, _ = verify_cuda.count_mismatches(g, r, atol, rtol)
            if not bad:
                continue
            # The rare path: torch ops find the words for the failure.
            why = _compare_chunk(g, r, s, ref, floating, atol, rtol)
            return why or (f"{bad} elements outside atol={atol:g} rtol={rtol:g}, first at "
                           f"{_at(ref, s + first)} (got {g[first].item():.6g}, expected {r[first].item():.6g})")
        why = _compare_chunk(g, r, s, ref, floating, atol, rtol)
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


def _descs(xs):
    """A row's argument descriptors: layout for tensors (no values), values for the rest."""
    return [{"shape": list(x.shape), "dtype": str(x.dtype)} if isinstance(x, torch.Tensor) else {"value": x}
            for x in xs]


def copy_rates_for(job):
    """(input copy, seal) rates in bytes per us: the worker's copy probe's
    (measured with the GPU to themselves), each capped at the device's peak
    (a copy reads and writes: half of it); the peak where the probe gave
    none; 0 off the GPU. The input copy is taken off at the first; the
    second caps what a candidate's seal takes off (seal_off_us). Never
    faster than the hardware."""
    peak = peak_copy_bytes_per_us(job["device"])
    if peak <= 0:
        return 0.0, 0.0
    probe_in = float(job.get("input_copy_bytes_per_us") or 0.0)
    probe_seal = float(job.get("seal_bytes_per_us") or 0.0)
    return (min(probe_in, peak / 2) if probe_in > 0 else peak / 2,
            min(probe_seal, peak) if probe_seal > 0 else peak)


def seal_off_us(out_bytes, seal_rate, seal_gpu_us, forwards, baseline):
    """What the seal's read of one forward's outputs takes off the trusted
    figure (us): the seal's own GPU time in this block (seal_gpu_us, CUDA
    events around it, for the block's `forwards`). At the probe's rate, on an
    H200, eager torch's 1 GiB ReLU outputs kept ~0.7 ms of our seal in every
    baseline block (3.0 ms on the GPU against 2.3 ms for a candidate's
    outputs of the same size, and 2.4 ms when read again after the clock) and
    a candidate's had 0.3 ms of its own time taken off: an honest ReLU 6%
    slower than eager's was paid reward 3. A baseline (our process and the
    task's Model) takes off what its seal took; a candidate, whose work could
    slow our seal, never more than the probe's rate allows. Without a GPU
    time (off the GPU) the probe's rate."""
    if seal_rate <= 0:
        return 0.0
    probe = out_bytes / seal_rate
    if seal_gpu_us <= 0 or forwards <= 0:
        return probe
    measured = seal_gpu_us / forwards
    return measured if baseline else min(measured, probe)


peak_copy_bytes_per_us = profiling.peak_copy_bytes_per_us


CandidateGone = protocol.CandidateGone
_DUE = object()  # an expected entry's fp64 outputs, not computed yet
# Forwards of a block checked against the fp64 reference (precision.py step
# 2). Cheating on a fraction f of a block's forwards is missed with
# probability about (1 - f)^8 per block, over every block of the evaluation.
NORM_CHECKS_PER_BLOCK = 8


class _CheckBatch:
    """A block's GPU checks (verify_cuda.check_launch): launched as outputs
    are met, read with one synchronisation; earlier once the fp64 outputs
    they hold pass HOLD_HI_BYTES (a block's could fill the device)."""

    HOLD_HI_BYTES = 1 << 30

    def __init__(self, atol, rtol):
        self.atol, self.rtol = atol, rtol
        self.waiting, self.sums, self.hi_bytes = [], [], 0

    def add(self, got, ref, hi, scaled):
        """Queues one output's check; returns its index into read()'s list."""
        self.waiting.append((got, ref, hi, scaled))
        self.hi_bytes += hi.nbytes if hi is not None else 0
        index = len(self.sums) + len(self.waiting) - 1
        if self.hi_bytes >= self.HOLD_HI_BYTES:
            self._flush()
        return index

    def _flush(self):
        if not self.waiting:
            return
        slots = verify_cuda.check_slots([ref.numel() for _, ref, _, _ in self.waiting])
        for i, (got, ref, hi, scaled) in enumerate(self.waiting):
            lo = ref.reshape(-1).contiguous()
            rms = verify_cuda.sum_squares_launch(lo) if scaled else None
            hi = hi.reshape(-1).contiguous() if hi is not None else None
            verify_cuda.check_launch(got, lo, hi, self.atol, self.rtol, slots[i], rms)
        self.sums += verify_cuda.read_checks(slots)
        self.waiting, self.hi_bytes = [], 0

    def read(self):
        """(not_close, new_nan, first_not_close, first_new_nan, err2, ref2,
        own2) of every output added, in order."""
        self._flush()
        return self.sums


class Driver:
    """Runs blocks of forwards on the executor; every forward goes through
    `block`, whatever the caller will do with it."""

    def __init__(self, job, to_cand, from_cand, exchange, result, policy, prepare=None):
        self.job, self.to_cand, self.ex, self.result = job, to_cand, exchange, result
        self.policy = policy
        self.reader = protocol.LineReader(from_cand)
        self.calls = 0
        self.poison_bytes = 1 << 20
        self.capacity = 1  # forwards a block may hold (profiling.run_profile sets it)
        self.prepare = prepare or (lambda: None)  # the L2 flush, before each clock
        self.input_rate, self.seal_rate = copy_rates_for(job)
        self.expect_ready = False  # the executor says "ready" once its post-call checks are done
        self.poisoned = (0, None)  # rows (and outputs) poisoned after the last block, checked once the executor is idle
        self.clock = None  # protocol.Timeline: a block's parts, where the caller keeps one
        # On the GPU the waits inside the clock poll a shared page (protocol.Doorbell).
        self.bell = protocol.Doorbell(os.path.join(job["exchange_dir"], protocol.Doorbell.FILE), create=True) \
            if job["device"] == "cuda" else None

    def _mark(self, step):
        if self.clock is not None:
            self.clock.mark(step)

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

    def wait_idle(self):
        """The executor's word that its start is done and its GPU work finished,
        before it imports the candidate's code (it waits for our "start")."""
        self._read_until("idle")

    def block(self, rows, expected, graph=False):
        """Runs one block: rows[k] are forward k's arguments, expected[k] its
        expected outputs; `graph` asks the executor to capture the block once
        and replay it (sandbox/harness/graphs.py). Returns the call record
        with the trusted figure."""
        if self.expect_ready:
            self._read_until("ready")
            self.expect_ready = False
            self._check_poison()
        self._mark("block_ready")
        j = self.calls
        self.calls += 1
        los = expected[0]["lo"]
        self.ex.ensure(wire.tensor_bytes(rows[0]), wire.tensor_bytes(los), len(rows))
        self._mark("block_ensure")
        staging = self.ex.stage(rows)
        self._mark("block_stage")
        shot = self.ex.snapshot_for(len(rows))
        self.ex.begin_block()
        self._mark("block_snapshot")
        cuda = self.ex.u8.is_cuda
        msg = {"type": "call", "id": j, "forwards": [_descs(xs) for xs in rows],
               "poison_bytes": self.poison_bytes, "release": self.job.get("release_each_call", False),
               "graph": bool(graph), "doorbell": self.bell is not None}
        try:
            msg["exchange"] = self.ex.offer()  # the first call hands over the area's fd
        except OSError as e:  # BrokenPipeError included: it exited (at import, say)
            raise CandidateGone(f"candidate gone ({type(e).__name__})") from e
        if not _send(self.to_cand, msg):
            raise CandidateGone("candidate gone")
        self._mark("block_call")
        armed = self._read_until("armed", j)
        self._mark("block_arm")
        self.ex.premap(armed.get("held_segments"))
        told = armed if "outputs" in armed else None  # a replay's outputs are where its capture put them
        mapped_in_clock = 0  # segments locate maps inside the clock (eager blocks only)
        if told is not None:
            self.ex.locate(shot, told.get("outputs"), told.get("segments"))
        # Before the clock: the block's rows hold poison; the L2 is flushed
        # last, by us, so the GPU is on our context when the clock starts
        # with our copy (a context switch costs ~0.3 ms on an H100).
        self.prepare()
        if cuda:
            torch.cuda.synchronize()
        self._mark("block_prepare")
        # GPU timestamps of our own two copies (diagnostics: a copy slower than
        # its probe on the GPU itself, or only on our clock, which waited).
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(4)] if cuda else None
        t0 = time.perf_counter()
        if cuda:
            evs[0].record()
        self.ex.write_inputs(staging)
        if cuda:
            evs[1].record()
            torch.cuda.synchronize()
        t_in = time.perf_counter()
        go_at = time.monotonic()
        if not _send(self.to_cand, {"type": "go"}):
            raise CandidateGone("candidate gone")
        rang = False
        if self.bell is not None:  # the message first, then the bell: a woken reader finds it
            self.bell.ring(protocol.Doorbell.GO, j + 1)
            rang = self.bell.wait(protocol.Doorbell.DONE, j + 1, protocol.CLOCK_SPIN_S, self.reader.fd)
        # A replay's outputs are where "armed" said: its "done" is read after
        # the clock. Rung early, the seal reads what is there then; an output
        # finished later differs from the seal (written after done).
        done = None if rang and told is not None else self._read_until("done", j)
        t_done = time.perf_counter()
        done_at = time.monotonic()
        if told is None:
            told = done
            mapped_in_clock = self.ex.locate(shot, told.get("outputs"), told.get("segments"))
        t_loc = time.perf_counter()
        if cuda:
            evs[2].record()
        self.ex.seal(shot)
        if cuda:
            evs[3].record()
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        gpu_copies = ({"inputs_gpu_us": evs[0].elapsed_time(evs[1]) * 1e3,
                       "seal_gpu_us": evs[2].elapsed_time(evs[3]) * 1e3} if cuda else {})
        self._mark("block_clock")
        if done is None:
            done = self._read_until("done", j)
        changed_after_seal = self.ex.take(shot)
        reply = self._read_until("result", j)
        self._mark("block_result")
        reply["outputs"] = told.get("outputs")
        self.expect_ready = True
        lay = self.ex.layout
        n = len(rows)
        # Our work inside the clock: the staged inputs copied in, at the rate
        # the worker's probe reached alone (copy_rates_for), and the seal's
        # read of the outputs (seal_off_us).
        seal_us = seal_off_us(sum(lay.out_sizes), self.seal_rate, gpu_copies.get("seal_gpu_us", 0.0), n,
                              bool(self.job.get("baseline")))
        copies_us = sum(lay.in_sizes) / self.input_rate + seal_us if self.input_rate > 0 else 0.0
        block_us = (t1 - t0) * 1e6
        return {"id": j, "rows": rows, "expected": expected, "staging": staging, "shot": shot, "reply": reply,
                "forwards": n, "block_us": block_us, "trusted_us": max(block_us / n - copies_us, 1e-3),
                "copies_us": copies_us, "graph": bool(graph) and reply.get("graph") == "replayed",
                "changed_after_seal": changed_after_seal,
                "phases": {"inputs_us": (t_in - t0) * 1e6, "forwards_us": (t_done - t_in) * 1e6,
                           "locate_us": (t_loc - t_done) * 1e6, "seal_us": (t1 - t_loc) * 1e6,
                           "segments_mapped_in_clock": mapped_in_clock, **gpu_copies,
                           "seal_off_us": seal_us,
                           **_wake_latencies(go_at, done, done_at)}}

    def check(self, call, scale_atol_for=()):
        """"" when every forward's outputs match, else the first reason.
        scale_atol_for: the forwards whose atol is multiplied by max(1, rms of
        the reference) (the large-magnitude distribution).

        Every output is compared elementwise with the Model's (step 1,
        precision.py); step 2, the norm against the fp64 reference, runs on
        every forward of a block of up to NORM_CHECKS_PER_BLOCK and on that
        many drawn here, after the block, otherwise (the executor cannot tell
        which: the forwards it ran are alike, and the draw is ours). On the GPU
        both run as one launch per output and one synchronisation per block
        (verify_cuda.check_launch); elsewhere, output by output with torch."""
        metas_all = call["reply"].get("outputs")
        n = call["forwards"]
        if not isinstance(metas_all, list) or len(metas_all) != n:
            return f"answered {len(metas_all) if isinstance(metas_all, list) else '?'} forwards of {n}"
        atol, rtol = float(self.job["atol"]), float(self.job["rtol"])
        norm_for = set(range(n)) if n <= NORM_CHECKS_PER_BLOCK else \
            set(secrets.SystemRandom().sample(range(n), NORM_CHECKS_PER_BLOCK))
        results = []  # per output in order: a reason, "" or a launched check (see _judge)
        batch = _CheckBatch(atol, rtol)
        for k, (metas, exp) in enumerate(zip(metas_all, call["expected"])):
            refs, his = exp["lo"], exp.get("hi", _DUE)
            if not isinstance(metas, list) or len(metas) != len(refs):
                results.append((k, 0, f"returned {len(metas) if isinstance(metas, list) else '?'} outputs, "
                                      f"expected {len(refs)}"))
                break
            for o, (ref, meta) in enumerate(zip(refs, metas)):
                if not isinstance(ref, torch.Tensor):
                    continue
                meta = meta if isinstance(meta, dict) else {}
                try:
                    why, pending = "", None
                    norm = k in norm_for and self.policy.wants_norm(ref)
                    if norm and his is _DUE:  # the fp64 outputs, computed now: no block holds them all
                        his = self.policy.hi(call["rows"][k], refs)
                    hi = his[o] if norm and his is not None else None
                    unreadable = call["shot"].errors.get((k, o))
                    got = self.ex.output(call["shot"], k, o, ref.numel(), ref.dtype)
                    why = f"unreadable output ({unreadable})" if unreadable else structure(ref, meta, got)
                    scaled = k in scale_atol_for
                    if not why and ref.numel():
                        if verify_cuda.available() and verify_cuda.checkable(ref) and got.is_cuda:
                            pending = (ref, meta, got, hi is not None, scaled, norm, batch.add(got, ref, hi, scaled))
                        else:
                            a = atol * max(1.0, _rms(ref)) if scaled else atol
                            why = compare(ref, meta, got, a, rtol)
                            if not why and norm:
                                why = self.policy.norm_check(got.to(ref.device).view(ref.shape), ref, hi)
                except torch.cuda.OutOfMemoryError:
                    raise  # our memory, not the candidate's bytes: INFRA_ERROR, never a wrong answer
                except Exception as e:  # noqa: BLE001 - bytes the candidate wrote do not load
                    why, pending = f"unreadable output ({type(e).__name__}: {e})"[:300], None
                results.append((k, o, pending if pending is not None else why))
        sums = batch.read()
        for k, o, what in results:
            why = self._judge(what, sums, atol, rtol) if isinstance(what, tuple) else what
            if why:
                where = f"output {o}" if n == 1 else f"forward {k} output {o}"
                return f"{where}: {why}"
        return ""

    def _judge(self, pending, sums, atol, rtol):
        """The reason a launched output fails, from its counts and sums."""
        ref, meta, got, has_hi, scaled, norm, i = pending
        bad, _, _, _, err2, ref2, own2 = sums[i]
        if bad:
            # The rare path: the elementwise compare again, for its words.
            a = atol * max(1.0, _rms(ref)) if scaled else atol
            return compare(ref, meta, got, a, rtol) or f"{bad} elements outside atol={a:g} rtol={rtol:g}"
        if norm:
            return self.policy.judge(err2, ref2, own2, has_hi, ref.dtype)
        return None

    def close(self, call):
        """Done with a block: the trusted after-checks, then poison.
        Returns (inputs written, outputs changed after the snapshot)."""
        mutated = self.ex.inputs_changed(call["staging"])
        late = call["changed_after_seal"] or self.ex.outputs_changed(call["shot"])
        self.ex.poison(call["forwards"], call["shot"])
        self.poisoned = (call["forwards"], call["shot"])
        return mutated, late

    def _check_poison(self):
        """Once the executor's post-block phase is over ("ready", or its last
        message): the area it could still write must hold our poison."""
        rows, shot = self.poisoned
        if rows and self.ex.u8 is not None and not self.ex.poison_intact(rows, shot):
            self.result["written_after_done"] = True
        self.poisoned = (0, None)

    def stop(self):
        """Ends the executor; returns its "done" message (evidence) or None."""
        if self.expect_ready and self.result["candidate_error"] is None:
            # The last block's after-check, while the executor (whose memory
            # we read) is still alive.
            try:
                self._read_until("ready")
                self._check_poison()
            except CandidateGone:
                pass
            self.expect_ready = False
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
            if msg.get("type") == "finished":
                self.result["candidate_done"] = True
            elif msg.get("type") == "error":
                self.result["candidate_error"] = {k: msg.get(k) for k in ("kind", "stage", "message", "audit",
                                                                          "torch_ops")}
        return msg


def load_protocol(job):
    """The protocol's half of the job, from the trusted dir (never sent to the zygote's children)."""
    path = os.path.join(job["trusted_dir"], PROTOCOL_FILE)
    with open(path) as f:
        protocol_half = json.load(f)
    job.update({k: protocol_half[k] for k in PROTOCOL_KEYS if k in protocol_half})
    return job


def _wake_latencies(go_at, done, done_at):
    """The executor's word (diagnostics only, never paid) on when its wait
    for "go" ended and when it sent "done", against ours (CLOCK_MONOTONIC, one
    clock for every process on the host): how long each side took to see the
    other's signal."""
    woke, sent = done.get("woke"), done.get("sent")
    if not all(isinstance(t, (int, float)) for t in (woke, sent)) or not go_at <= woke <= sent <= done_at:
        return {}
    return {"go_wake_us": (woke - go_at) * 1e6, "done_read_us": (done_at - sent) * 1e6}


class InputSets:
    """Fresh input sets and their expected outputs (the Model's; the fp64
    ones are computed when they are compared), drawn from the secret seeds."""

    def __init__(self, mod, policy, dists, device, seed):
        self.mod, self.policy, self.dists, self.device = mod, policy, dists, device
        self.seed = seed
        self.count = 0

    def make(self, dist=None):
        """(dist, xs, expected) of the next set."""
        return self.make_block(1, dist)[0]

    def make_block(self, count, dist=None):
        """[(dist, xs, expected)] of the next `count` sets. Where the task's
        math is undefined on a set's distribution (NaN in the Model's
        outputs), the set is drawn again from the task's own; the NaN checks
        of all `count` sets wait on the device once."""
        sets, nans = [], []
        for _ in range(count):
            i = self.count
            self.count += 1
            d = dist or self.dists[i % len(self.dists)]
            seed = profiling.timing_seed(self.seed, i)
            with torch.no_grad():
                xs = inputs_lib.make_inputs(self.mod, seed, d, self.device)
                lo = self.policy.lo(xs)
            sets.append([d, xs, {"lo": lo}, seed])
            if d != "task":
                nans += [(len(sets) - 1, torch.isnan(o).any()) for o in lo
                         if isinstance(o, torch.Tensor) and o.is_floating_point()]
        if nans:
            flags = torch.stack([f for _, f in nans]).tolist()
            for k in sorted({k for (k, _), bad in zip(nans, flags) if bad}):
                seed = sets[k][3]
                with torch.no_grad():
                    xs = inputs_lib.make_inputs(self.mod, seed, "task", self.device)
                    sets[k][:3] = ["task", xs, {"lo": self.policy.lo(xs)}]
        return [tuple(s[:3]) for s in sets]


class NoTurn(Exception):
    """The worker refused the job a turn (Turns.ask)."""


class Turns:
    """The job's turns on the worker's GPU, asked through the zygote
    (harness_protocol.proto HarnessClockRequest): "start" before the candidate
    imports its code, "clock" before the first timed block. The waits are not
    the job's own time: their sum is kept in job["turn_wait_s"], off the
    profile's wall."""

    def __init__(self, job, clock_fds):
        self.job = job
        self.request_fd, grant_fd = clock_fds
        self.grants = protocol.LineReader(grant_fd)

    def ask(self, step):
        job = self.job
        asked = time.monotonic()
        protocol.send(self.request_fd, {"clock_request": {"step": step}})
        grant = self.grants.read(timeout=float(job["wall_seconds"]) + float(job.get("turn_wait_seconds") or 0) + 60)
        job["turn_wait_s"] = job.get("turn_wait_s", 0.0) + time.monotonic() - asked
        grant = grant or {}
        if not grant.get("granted"):
            raise NoTurn(grant.get("error") or "the worker did not answer")
        if step == "clock":
            job["gpu_lease_quiet_since_unix_s"] = float(grant.get("gpu_lease_quiet_since_unix_s") or 0.0)


def run(job, to_cand, from_cand, result_fd, xsock=-1, clock_fds=None):
    device = job["device"]
    result = {"sets": [], "candidate_flags": [], "candidate_error": None, "candidate_done": False,
              "mutated": False, "written_after_done": False, "ref_error": None, "details": [], "forward_ms": [],
              "forward_us": [], "precision": ""}
    t_start = time.perf_counter()
    clock = protocol.Timeline(job.get("t0_mono"))
    exchange = wire.RefExchange(job["exchange_dir"], device, xsock)
    try:
        load_protocol(job)
        scaled_dists = set(job.get("atol_scaled_dists") or [])
        n = int(job["num_sets"])
        if device == "cpu":
            # One thread: idle OpenMP workers spinning here would take the
            # cores the executor's forwards run on.
            torch.set_num_threads(1)
        if device == "cuda":
            torch.cuda.set_device(0)
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            verify_cuda.load(job.get("verify_cuda_lib", ""))
            clock.mark("cuda_init")
        mod = loader.load_module(job["reference_model"], "kernelrl_task_model")
        model, _ = inputs_lib.make_model(mod, job["init_seed"], device)
        policy = precision.Policy(job.get("precision") or "strict", model, job["precision_ratio"],
                                  job["precision_floor_units"], job["precision_max_hi_bytes"])
        result["precision"] = policy.name
        clock.mark("task_model")
        # Secrets are drawn here, after the fork: the zygote (whose memory the
        # candidate process is a copy of) never holds them.
        sets = InputSets(mod, policy, job["distributions"], device, secrets.randbits(63))
        backend = profiling.RemoteBackend(job) if job.get("profile") else None
        driver = Driver(job, to_cand, from_cand, exchange, result, policy,
                        prepare=backend.prepare if backend else None)
        # The candidate imports its code when we say so: a job that profiles first waits for
        # its turn (one such job at a time on the worker from here; sandbox/gpu_turns.h). Both
        # processes are idle meanwhile, their GPU work finished: another job's clock may run.
        turns = Turns(job, clock_fds)
        verified = True
        try:
            driver.wait_idle()
        except CandidateGone:
            if result["candidate_error"] is None and not result["details"]:
                result["details"].append("candidate stopped before its start")
            verified = False
        if verified:
            if device == "cuda":
                torch.cuda.synchronize()
            if job.get("profile"):
                turns.ask("start")
                clock.mark("start_queue")
            _send(to_cand, {"type": "start"})
        for i in range(n if verified else 0):
            dist, xs, exp = sets.make()
            driver.poison_bytes = sum(o.nbytes for o in exp["lo"] if isinstance(o, torch.Tensor)) + (1 << 20)
            clock.mark("prepare")
            try:
                call = driver.block([xs], [exp])
            except CandidateGone:
                if result["candidate_error"] is None and not result["details"]:
                    result["details"].append(f"candidate stopped before set {i}")
                verified = False
                break
            result["forward_ms"].append(call["block_us"] / 1e3)
            result["forward_us"].append(call["phases"]["forwards_us"] / max(1, call["forwards"]))
            clock.mark("wait_candidate")
            entry = {"set": i, "dist": dist, "ok": True, "detail": ""}
            why = driver.check(call, scale_atol_for={0} if dist in scaled_dists else ())
            mutated, late = driver.close(call)
            if mutated:
                result["mutated"] = True
                entry.update(ok=False, detail="forward modified its inputs")
            elif late:
                result["written_after_done"] = True
                entry.update(ok=False, detail="outputs changed after the executor said done")
            elif why:
                entry.update(ok=False, detail=f"set {i} ({dist}) {why}")
            del call
            clock.mark("compare")
            result["sets"].append(entry)
            if not entry["ok"]:
                verified = False
                break
        if policy.note:
            result["details"].append(policy.note)
        report = None
        if verified and job.get("profile"):
            turns.ask("clock")
            clock.mark("clock_queue")
            if device == "cuda":
                torch.cuda.empty_cache()  # verify-era blocks: room for the timed sets
            report = profiling.run_profile(job, mod, model, driver, sets, backend, result, clock)
            clock.mark("profile")
        else:
            driver.stop()
        if report is not None:
            result["profile"]["candidate_report"] = report
    except NoTurn as e:  # the worker says why in the verdict (INFRA_ERROR)
        result["ref_error"] = f"the worker gave no turn: {e}"
    except Exception:  # noqa: BLE001 - a failing reference is our fault, not the candidate's
        result["ref_error"] = traceback.format_exc(limit=6)[-3000:]
    _send(to_cand, {"type": "stop"})
    try:
        exchange.release()
    except Exception:  # noqa: BLE001 - the process ends next; the verdict is decided
        pass
    result["exchange"] = exchange.note
    result["reference_ms"] = (time.perf_counter() - t_start) * 1e3
    result["timeline"] = clock.report()
    protocol.send(result_fd, result)
    return 0
