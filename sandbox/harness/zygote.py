"""The zygote: a warm Python process that imported torch (never CUDA) and
forks, per evaluation, a fresh reference process and a fresh supervised
candidate process; no process ever serves two candidates. Speaks JSON lines
with the C++ worker on stdin/stdout (see sandbox/verify_stage.h).

Per verify job:
  zygote ─┬─ reference (trusted: builds inputs, runs Model, compares)
          └─ supervisor (C++ phase 1: namespaces) ── candidate (pid 1; phase 2
             mounts/rlimits/fds; phase 3 seccomp after CUDA init)
The supervisor's watchdog kills the candidate's whole process group and pid
namespace on timeout or when the tree's resident host memory passes the cap
(optionally backed by a cgroup v2 memory.max); the zygote sends the
supervisor's and the reference process's reports back as facts, and the worker
decides the outcome (sandbox/verify_outcome.h). On CUDA the worker also asks
for isolation probes at start and picks the isolation every job runs under
(sandbox/isolation_calibration.h): nothing here decides a verdict."""
import argparse
import json
import os
import signal
import socket
import sys
import time
import traceback

# Protocol on the real stdout; everything else printed goes to stderr.
_PROTO_OUT = os.dup(1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import ctypes  # noqa: E402
import threading  # noqa: E402

import torch  # noqa: E402  (after the fd shuffle, before any fork)

import candidate  # noqa: E402
import contain  # noqa: E402
import device_memory  # noqa: E402
import profiling  # noqa: E402
import protocol  # noqa: E402
import reference  # noqa: E402
import verify_cuda  # noqa: E402
import wire  # noqa: E402

LIBC = ctypes.CDLL(None, use_errno=True)
# The copy probe: bytes copied and sealed a round (a 10 us kernel's block
# moves a few GB), and the least share of the peak's rate it accepts (an
# H200 alone: 0.87 for the input copy, 0.85 for the seal).
COPY_PROBE_BYTES = 2 << 30
COPY_PROBE_FLOOR = 0.7


def tail(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return contain.cut_note(size, n) + f.read().decode(errors="replace")
    except OSError:
        return ""


def valid_utf8(obj):
    """`obj` with every string valid UTF-8 (lone surrogates, which text from the
    candidate's process can carry through JSON, become "?"): the worker's JSON
    parser rejects a reply holding one, which would turn the candidate's
    verdict into INFRA_ERROR."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "replace").decode("utf-8")
    if isinstance(obj, dict):
        return {valid_utf8(k): valid_utf8(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [valid_utf8(v) for v in obj]
    return obj


def fmt_bytes(n):
    """Same wording as FormatBytes in sandbox/contain/host_memory.cc."""
    return f"{n / (1 << 30):.2f} GiB" if n >= (1 << 30) else f"{n / (1 << 20):.1f} MiB"


def import_profiler(root):
    """Imports the profiler's entry point once, here (never CUDA), so every
    forked candidate has it warm. Returns "" or why profiling is unavailable."""
    if not root:
        return "no profiler_root configured"
    if root not in sys.path:
        sys.path.append(root)
    try:
        import profiler_service.harness.protocol  # noqa: F401
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"[profiler] WARNING cannot import profiler_service.harness.protocol from {root}: {e}\n")
        return f"{type(e).__name__}: {e}"
    return ""


def warm_up():
    """Runs every harness code path once on tiny CPU tensors so that lazy
    imports and first-use initialisation happen here, once, and not in each
    forked process (the first guarded forward otherwise costs ~3 s)."""
    import types
    import guards
    import inputs as inputs_lib
    import tempfile
    task = types.SimpleNamespace(get_inputs=lambda: [torch.rand(4, 4), torch.randint(0, 3, (4,))],
                                 get_init_inputs=lambda: [],
                                 Model=lambda: torch.nn.Linear(4, 4))
    xs = inputs_lib.make_inputs(task, 1, "normal", "cpu")
    inputs_lib.fingerprint(xs)
    model, _ = inputs_lib.make_model(task, 1, "cpu")
    model.load_state_dict(model.state_dict(), strict=False)
    g = guards.TorchOpGuard()
    with torch.no_grad():
        with g:
            y = torch.empty_like(xs[0])
            try:
                torch.add(xs[0], xs[0])
            except guards.TorchOpForbidden:
                pass
            guards.guard_still_active(g)
    candidate.storage_range(y)
    guards.PatchSnapshot().changed()
    guards.thread_count()
    with tempfile.TemporaryDirectory() as d:
        ex = wire.RefExchange(d, "cpu")
        ex.ensure(wire.tensor_bytes(xs), [64], 2)
        staging = ex.stage([xs, xs])
        ex.write_inputs(staging)
        shot = ex.snapshot_for(2)
        meta = {"type": "Tensor", "layout": "torch.strided", "device": "cpu", "dtype": "torch.float32",
                "shape": [4, 4], "slot": 0}
        ex.locate(shot, [[meta], [meta]], [])
        ex.seal(shot)
        ex.take(shot)
        reference.compare(xs[0], meta, ex.output(shot, 0, 0, 16, torch.float32), 1e-2, 1e-2)
        ex.inputs_changed(staging)
        ex.outputs_changed(shot)
        ex.poison(2, shot)
        ex.release()
    torch.isclose(xs[0], xs[0]).all()
    torch.unravel_index(torch.tensor(3), (4, 4))
    # Children initialise CUDA themselves; a zygote that did would poison them.
    if torch.cuda.is_initialized():
        raise RuntimeError("zygote warm-up initialised CUDA: forked children could not use it")


def _answer(r, w, pid, timeout):
    """A probe child's one answer on the pipe (r, w), then the child reaped."""
    os.close(w)
    rep = protocol.LineReader(r).read(timeout=timeout) or {"ok": False, "error": "no answer"}
    os.close(r)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    return rep


class Zygote:
    def __init__(self, lib_path, device, profiler_root="", cgroup_parent="", verify_cuda_lib=""):
        self.cont = contain.Contain(lib_path)
        # Loaded by each child after its CUDA init (never here: no CUDA in the zygote).
        self.verify_cuda_lib = verify_cuda_lib if device == "cuda" else ""
        if device == "cuda" and not (verify_cuda_lib and os.path.isfile(verify_cuda_lib)):
            sys.stderr.write(f"[zygote] WARNING no verify_cuda library ({verify_cuda_lib or 'not configured'}): "
                             "torch digests/comparisons and outputs through host files (slower verify)\n")
        self.caps = self.cont.probe()
        self.jobs = 0
        # Kernel-enforced backstop to the watchdog's memory cap, where the host
        # delegates a cgroup v2 memory controller to us (probed once, here).
        self.cgroup_parent = cgroup_parent
        self.cgroup_error = self.cont.cgroup_probe(cgroup_parent) if cgroup_parent else "no cgroup parent configured"
        if self.cgroup_error:
            sys.stderr.write(f"[contain] WARNING no memory cgroup for candidates ({self.cgroup_error}): "
                             "host memory is capped by the watchdog alone\n")
        self.device = device
        self.memory_baseline = None  # the first health probe's device_memory.measure()
        # Set once a job ran where its processes could leave our tree: the
        # health probe then counts the whole device (device_memory.py).
        self.tree_escape = ""
        self.probe_roots = {}  # prefix -> temp dir the start-up probes run in
        self.profiler_error = import_profiler(profiler_root)
        warm_up()
        contain.python_view()  # once here: every job's supervisor inherits it

    # ----- verify -----------------------------------------------------------
    def verify(self, job):
        # The protocol's half of the job travels through the trusted dir to the
        # reference process alone (reference.PROTOCOL_KEYS): not even its
        # empty fields reach the children's memory.
        for k in reference.PROTOCOL_KEYS:
            job.pop(k, None)
        t0 = time.perf_counter()
        job["t0_mono"] = time.monotonic()  # both children report their timelines against it
        # Asked for by the worker (on CUDA: what its calibration picked) AND
        # allowed by this host (the library's step table; nothing assumed).
        iso = self.cont.allowed_isolation(job["isolation"], self.caps)
        job["isolation"] = iso
        if not (iso.get("seccomp") or iso.get("pid_ns")):
            self.tree_escape = "a job ran without seccomp or a pid namespace (its processes could leave our tree)"
        if job.get("profile") and self.profiler_error:
            job["kprof_lib"] = ""
            job["profile"] = False  # logged at start; the worker sees profile.started == false
        exchange = job["exchange_dir"]
        os.makedirs(exchange, exist_ok=True)
        os.makedirs(job["scratch_dir"], exist_ok=True)
        exchange_mounted = False
        if self.caps.get("tmpfs") and iso.get("mount_ns"):
            # Huge pages make the multi-GB output copies fault 512x less often.
            for extra in (",huge=within_size", ""):
                opts = f"size={int(job['exchange_bytes'])},mode=0700{extra}".encode()
                exchange_mounted = LIBC.mount(b"tmpfs", exchange.encode(), b"tmpfs", 0, opts) == 0
                if exchange_mounted:
                    break
        c2r = os.pipe()
        r2c = os.pipe()
        res = os.pipe()
        sup = os.pipe()
        # The GPU output exchange's fd goes from the reference to the candidate here.
        xref, xcand = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        job["verify_cuda_lib"] = self.verify_cuda_lib
        cand_log = os.path.join(exchange, "candidate.log")
        ref_log = os.path.join(job["trusted_dir"], "reference.log")
        cgroup, cgroup_note = "", ""
        if not self.cgroup_error and int(job.get("cgroup_memory_bytes") or 0) > 0:
            self.jobs += 1
            cgroup, why = self.cont.cgroup_create(self.cgroup_parent, f"kernelrl-{os.getpid()}-{self.jobs}",
                                                  int(job["cgroup_memory_bytes"]))
            cgroup_note = (f"memory_cgroup: ok (memory.max {fmt_bytes(int(job['cgroup_memory_bytes']))})" if cgroup
                           else f"memory_cgroup: FAILED {why} -> watchdog cap only")

        contain.python_view()  # here, so that the supervisor inherits it (no-op unless modules were imported)
        # The candidate's side first: its confinement and start are the longer
        # path to the first block (a fork of this process takes ~25 ms).
        sup_pid = os.fork()
        if sup_pid == 0:
            self._child_supervisor(job, c2r[1], r2c[0], sup[1], cand_log, cgroup, xcand.fileno())
        # The reference's line to the worker for its clock (made after the supervisor's fork:
        # no candidate process ever holds it).
        clock_req = os.pipe()
        clock_grant = os.pipe()
        ref_pid = os.fork()
        if ref_pid == 0:
            self._child_reference(job, r2c[1], c2r[0], res[1], ref_log, xref.fileno(),
                                  (clock_req[1], clock_grant[0]))
        for fd in (c2r[0], c2r[1], r2c[0], r2c[1], res[1], sup[1], clock_req[1], clock_grant[0]):
            os.close(fd)
        xref.close()
        xcand.close()
        relay = threading.Thread(target=self._relay_clock, args=(job, clock_req[0], clock_grant[1]), daemon=True)
        relay.start()
        status = protocol.LineReader(sup[0]).read(timeout=self._wall(job) + 60) or {}
        ref = protocol.LineReader(res[0]).read(timeout=60) or {}
        for fd in (sup[0], res[0]):
            os.close(fd)
        for pid in (ref_pid, sup_pid):
            try:
                os.kill(pid, signal.SIGKILL) if os.waitpid(pid, os.WNOHANG)[0] == 0 else None
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        # The reference is gone, so its end of the request pipe is closed: the relay ends (its
        # wait for the worker's answer is bounded by the same deadline as the reference's).
        relay.join(timeout=self._wall(job) + 90)
        for fd in (clock_req[0], clock_grant[1]):
            os.close(fd)
        if cgroup:
            # Every member is gone now (the supervisor was reaped just above).
            status["cgroup_oom_kills"], status["cgroup_peak_bytes"] = self.cont.cgroup_remove(cgroup)
        if cgroup_note:
            status["contain_log"] = status.get("contain_log", "") + cgroup_note + "\n"
        if status.get("memory_samples"):
            status["contain_log"] = status.get("contain_log", "") + (
                f"host_memory: peak {fmt_bytes(status.get('peak_memory_bytes', 0))} resident of cap "
                f"{fmt_bytes(int(job.get('resident_memory_bytes') or 0))} ({status['memory_samples']} samples)\n")
        # Where the verify wall goes (reported in the verdict's contain log).
        status["contain_log"] = status.get("contain_log", "") + (
            "timing: verify %.0f ms; reference process %.0f ms (forward per set %s ms); "
            "candidate process %.0f ms wall, %.0f ms cpu\n" % (
                (time.perf_counter() - t0) * 1e3, ref.get("reference_ms", 0.0),
                ",".join("%.0f" % f for f in ref.get("forward_ms", [])), status.get("wall_ms", 0.0),
                status.get("cpu_ms", 0.0)))
        status["contain_log"] += ("timeline: reference %s\ntimeline: candidate (self-reported) %s\n"
                                  "output exchange: reference %s; candidate %s\n" % (
            protocol.format_timeline(ref.get("timeline")), protocol.format_timeline(ref.get("candidate_timeline")),
            ref.get("exchange", "?"), ref.get("candidate_exchange", "?")))
        outcome = {"facts": self._facts(status, ref)}
        outcome["logs"] = {"candidate": tail(cand_log, int(job.get("log_tail_bytes") or 8192)),
                           "reference": tail(ref_log, int(job.get("log_tail_bytes") or 8192)),
                           "contain": status.get("contain_log", "")}
        outcome["timings"] = {"verify_ms": (time.perf_counter() - t0) * 1e3,
                              "candidate_wall_ms": status.get("wall_ms", 0.0),
                              "candidate_cpu_ms": status.get("cpu_ms", 0.0),
                              "reference_ms": ref.get("reference_ms", 0.0),
                              "forward_ms": ref.get("forward_ms", []),
                              "candidate_peak_host_bytes": status.get("peak_memory_bytes", 0)}
        outcome["isolation"] = iso
        outcome["profile"] = self._collect_profile(job, ref.get("profile") or {})
        if exchange_mounted:
            LIBC.umount2(exchange.encode(), 2)  # MNT_DETACH
        return outcome

    @staticmethod
    def _wall(job):
        """The job's wall with the longest its candidate may wait for its turn to start."""
        return float(job["wall_seconds"]) + float(job.get("turn_wait_seconds") or 0.0)

    def _relay_clock(self, job, request_fd, grant_fd):
        """Passes the reference process's turn requests (harness_protocol.proto
        HarnessClockRequest: "start", then "clock") to the worker, each a line
        on our stdout before the job's reply, and the worker's answers back.
        Runs beside verify()'s wait for the children; the serve loop reads
        stdin only between jobs, so the answers are this thread's to read."""
        requests = protocol.LineReader(request_fd)
        while True:
            msg = requests.read(timeout=self._wall(job) + 60)
            if not msg or "clock_request" not in msg:
                return  # the reference ended (a verify-only job never asks)
            step = str((msg.get("clock_request") or {}).get("step") or "")
            protocol.send(_PROTO_OUT, {"job_id": job.get("job_id", ""), "clock_request": {"step": step}})
            grant = self.reader.read(timeout=self._wall(job) + 60) or {
                "granted": False, "error": "no answer from the worker"}
            try:
                protocol.send(grant_fd, grant)
            except OSError:
                return  # the reference is gone

    @staticmethod
    def _collect_profile(job, prof):
        """The trusted side's profile record. The measurement was assembled and
        written into the trusted dir by the reference process (never by the
        candidate's)."""
        keep = ("started", "ok", "error", "wall_ms", "lease_settle_ms", "rechecks", "recheck_failures", "detail",
                "measurement_file")
        prof = {k: prof[k] for k in keep if k in prof}
        if prof.get("started") and not prof.get("measurement_file"):
            prof["detail"] = (prof.get("detail") or "") + " no measurement"
        return prof

    def _child_reference(self, job, to_cand, from_cand, result_fd, log_path, xsock, clock_fds):
        code = 1
        try:
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            pol = contain.make_policy({}, parent_death_signal=signal.SIGKILL,
                                      keep_fds=[to_cand, from_cand, result_fd, xsock, *clock_fds])
            self.cont.phase(pol, 2)
            code = reference.run(job, to_cand, from_cand, result_fd, xsock, clock_fds)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            os._exit(code)

    def _child_supervisor(self, job, to_ref, from_ref, status_fd, log_path, cgroup="", xsock=-1):
        try:
            LIBC.prctl(4, 1, 0, 0, 0)  # dumpable again, or uid_map stays unwritable
            iso = job["isolation"]
            # The /proc the watchdog reads the candidate tree's memory from:
            # opened now, because the candidate mounts its own /proc over the
            # mount table it shares with us, and that one shows only its pids.
            proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
            cgroup_log = ""
            if cgroup:
                # Before the user namespace (writes to cgroupfs as ourselves);
                # the candidate inherits the cgroup at fork.
                why = self.cont.cgroup_enter(cgroup)
                cgroup_log = f"memory_cgroup: FAILED {why} -> watchdog cap only\n" if why else ""
            pol1 = self.cont.candidate_policy(iso, self.caps, contain.confine_fields(job, iso, self.caps, self.device))
            # Opened before the new mount namespace exists: an fd open for
            # writing on one of its mounts would make the read-only remount EBUSY.
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            _, log1 = self.cont.phase(pol1, 1)
            pid = os.fork()
            if pid == 0:
                self._child_candidate(job, to_ref, from_ref, log_fd, xsock)
            for fd in (to_ref, from_ref, log_fd, xsock):
                os.close(fd)
            st = self.cont.supervise(pid, self._wall(job), int(job.get("resident_memory_bytes") or 0),
                                     float(job.get("memory_poll_ms") or 10), proc_fd)
            st["contain_log"] = log1 + cgroup_log
            protocol.send(status_fd, st)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        os._exit(0)

    def _child_candidate(self, job, to_ref, from_ref, log_fd, xsock):
        code = 2
        try:
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            iso = job["isolation"]
            pol2 = self.cont.candidate_policy(
                iso, self.caps, contain.confine_fields(job, iso, self.caps, self.device),
                scratch_dir=job["scratch_dir"], scratch_bytes=int(job["scratch_bytes"]),
                writable_dirs=job["exchange_dir"], hidden_dirs=job["trusted_dir"],
                data_bytes=int(job["host_memory_bytes"]) if iso.get("data_limit", True) else 0,
                fsize_bytes=int(job["exchange_bytes"]),
                nofile=4096, keep_fds=[to_ref, from_ref, xsock, 1, 2])
            _, log2 = self.cont.phase(pol2, 2)
            sys.stderr.write("[contain] " + log2.replace("\n", "\n[contain] ") + "\n")
            os.environ.update(contain.candidate_env(job))
            code = candidate.run(job, self.cont, to_ref, from_ref, xsock)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)

    @staticmethod
    def _facts(st, ref):
        """What the supervisor (`st`) and the reference process (`ref`) reported,
        as HarnessVerifyFacts: typed, nothing decided. Strings the candidate's
        process sent are passed on as text."""
        def text(v):
            return "" if v is None else str(v)

        def texts(v):
            return [text(x) for x in v] if isinstance(v, (list, tuple)) else []

        prof = ref.get("profile") or {}
        facts = {"exit_code": int(st.get("exit_code") or 0), "signal": int(st.get("signal") or 0),
                 "timed_out": bool(st.get("timed_out")), "memory_exceeded": bool(st.get("memory_exceeded")),
                 "memory_at_kill_bytes": int(st.get("memory_at_kill_bytes") or 0),
                 "cgroup_oom_kills": int(st.get("cgroup_oom_kills") or 0),
                 "ref_error": text(ref.get("ref_error")),
                 "candidate_flags": texts(ref.get("candidate_flags")), "details": texts(ref.get("details")),
                 "sets": [{"set": int(x["set"]), "dist": text(x["dist"]), "ok": bool(x["ok"]),
                           "detail": text(x["detail"])} for x in ref.get("sets", [])],
                 "mutated": bool(ref.get("mutated")), "candidate_done": bool(ref.get("candidate_done")),
                 "written_after_done": bool(ref.get("written_after_done")),
                 "precision": text(ref.get("precision")),
                 "profile_started": bool(prof.get("started")), "profile_mutated": bool(prof.get("mutated")),
                 "rechecks": int(prof.get("rechecks") or 0), "recheck_failures": int(prof.get("recheck_failures") or 0),
                 "profile_detail": text(prof.get("detail") or "")}
        err = ref.get("candidate_error")
        if err:
            facts["candidate_error"] = {"kind": text(err.get("kind")), "stage": text(err.get("stage")),
                                        "message": text(err.get("message")), "audit": texts(err.get("audit")),
                                        "torch_ops": texts(err.get("torch_ops"))}
        return facts

    # ----- start-up probes (the worker picks from the answers) ----------------
    def _probe_root(self, prefix):
        import tempfile
        if prefix not in self.probe_roots:
            self.probe_roots[prefix] = tempfile.mkdtemp(prefix=prefix)
        return self.probe_roots[prefix]

    def isolation_probe(self, job):
        """CUDA in a child under exactly job["isolation"]: {ok, error}."""
        iso = {k: bool(v) for k, v in job["isolation"].items()}
        ok, err = self._cuda_probe(iso, self._probe_root("kernelrl-calib-"))
        sys.stderr.write(f"[calibrate] on={sorted(k for k, v in iso.items() if v)} ok={ok} {err[-300:]}\n")
        return {"ok": ok, "error": err[-400:]}

    def recorder_probe(self, job):
        """CUDA with the CUPTI recorder job["kprof_lib"] injected, under the
        isolation the worker picked for candidates, seccomp included, through
        one full timing cycle of the profiler's CUDA backend (flush, window,
        NVML, anchor, report): {ok, error, threads_started}. Not ok: the worker
        times profiled jobs without injection (CUDA-event timing, flag
        cupti_inactive) and logs a warning."""
        kprof_lib = job["kprof_lib"]
        ok, err = self._cuda_probe({k: bool(v) for k, v in job["isolation"].items()},
                                   self._probe_root("kernelrl-kprof-"), recorder=kprof_lib)
        sys.stderr.write(f"[calibrate] CUPTI recorder {kprof_lib} under the candidate isolation: ok={ok} {err[-300:]}\n")
        threads = int(err.split("+")[1].split()[0]) if ok and err.startswith("threads+") else 0
        return {"ok": ok, "error": err[-400:], "threads_started": threads}

    @staticmethod
    def _recorder_cycle(x):
        """What the profile stage does in the candidate process, once."""
        from profiler_service.harness import backends, kprof as kprof_mod
        import guards
        before = guards.thread_count()
        backend = backends.CudaBackend(flush_multiple=0.25, anchor_bytes=16 << 20)
        if not backend.cupti_active:
            raise RuntimeError("kprof did not load in the injected process")
        backend.prepare()
        t0 = backend.begin(kprof_mod.TAG_TIMED)
        y = x + 1
        sample = backend.end(t0)
        backend.anchor()
        report = backend.report()  # its timed windows: this one (the executor's warm window is untimed)
        grown = guards.thread_count() - before
        ok = float(y.sum().item()) == 3072.0 and sample.get("num_activities", 0) >= 1 and report.get("timed_windows", 0) >= 1
        detail = f"threads+{grown} cupti_us={sample.get('cupti_us', 0):.1f} nvml={backend.nvml.available}"
        return ok, detail if ok else "recorder cycle wrong: " + detail + " " + json.dumps(report)[:200]

    def _cuda_probe(self, iso, root, recorder=""):
        # The recorder's dir is bound into the probe's root exactly as into a
        # profiled candidate's (a probe without it failed on the H100).
        job = {"scratch_dir": os.path.join(root, "scratch"), "exchange_dir": os.path.join(root, "exchange"),
               "trusted_dir": os.path.join(root, "trusted"), "scratch_bytes": 16 << 20, "kprof_lib": recorder,
               "host_memory_bytes": 32 << 30, "exchange_bytes": 64 << 20, "isolation": iso}
        for d in ("scratch", "exchange", "trusted"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        r, w = os.pipe()
        sup = os.fork()
        if sup == 0:
            os.close(r)
            try:
                LIBC.prctl(4, 1, 0, 0, 0)
                view = contain.confine_fields(job, iso, self.caps, "cuda")
                self.cont.phase(self.cont.candidate_policy(iso, self.caps, view), 1)
                pid = os.fork()
                if pid == 0:
                    msg = {"ok": False, "error": ""}
                    try:
                        pol2 = self.cont.candidate_policy(
                            iso, self.caps, view,
                            scratch_dir=job["scratch_dir"], scratch_bytes=job["scratch_bytes"],
                            writable_dirs=job["exchange_dir"], hidden_dirs=job["trusted_dir"],
                            data_bytes=job["host_memory_bytes"] if iso.get("data_limit") else 0,
                            nofile=4096, keep_fds=[w, 2])
                        fails, log2 = self.cont.phase(pol2, 2) if iso.get("mount_ns") or True else (0, "")
                        if recorder:
                            profiling.inject_recorder({"profile": True, "device": "cuda", "kprof_lib": recorder})
                        torch.cuda.set_device(0)
                        x = torch.ones(1024, device="cuda") * 2
                        if recorder:  # as the candidate process does: warm window before seccomp
                            profiling.CallTimer({"profile": True, "device": "cuda", "kprof_lib": recorder})
                        if iso.get("seccomp"):
                            self.cont.phase(contain.make_policy({}, seccomp_profile=contain.KR_SECCOMP_CANDIDATE), 3)
                        if recorder:
                            ok, detail = self._recorder_cycle(x)
                            msg = {"ok": ok, "error": detail}
                        else:
                            ok = float((x + 1).sum().item()) == 3072.0
                            msg = {"ok": ok, "error": "" if ok else "wrong result"}
                    except BaseException as e:  # noqa: BLE001
                        msg = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                    protocol.send(w, msg)
                    os._exit(0)
                st = self.cont.supervise(pid, 60)
                if st["signal"]:
                    protocol.send(w, {"ok": False, "error": f"probe killed by signal {st['signal']}"})
            except BaseException as e:  # noqa: BLE001
                protocol.send(w, {"ok": False, "error": f"supervisor: {type(e).__name__}: {e}"})
            os._exit(0)
        rep = _answer(r, w, sup, 90)
        return bool(rep.get("ok")), str(rep.get("error", ""))

    def copy_probe(self, job):
        """Our in-clock copies alone on this GPU (wire.copy_rates), in a fresh
        child: {ok, error, input_copy_bytes_per_us, seal_bytes_per_us,
        peak_bytes_per_us, bytes}. Not ok where another process used the GPU
        meanwhile or a rate is under COPY_PROBE_FLOOR of the peak's: a busy
        GPU would make our copies look slow, and the trusted figure would
        then take off more than they cost."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            rep = {"ok": False, "error": ""}
            try:
                torch.cuda.set_device(0)
                err = verify_cuda.load(self.verify_cuda_lib)
                if err:
                    raise RuntimeError(f"no verify_cuda library: {err}")
                peak = reference.peak_copy_bytes_per_us("cuda")
                nbytes = min(COPY_PROBE_BYTES, torch.cuda.mem_get_info()[0] // 4) >> 20 << 20
                from profiler_service.harness import gpu_share, nvml
                share = gpu_share.Monitor(nvml.Processes(nvml.cuda_pci_bus_id(torch.cuda.get_device_properties(0))))
                share.begin()
                rate_in, rate_seal = wire.copy_rates(nbytes)
                share.poll()
                shared = share.result()
                rep.update(input_copy_bytes_per_us=rate_in, seal_bytes_per_us=rate_seal, peak_bytes_per_us=peak,
                           bytes=nbytes)
                low = peak > 0 and (rate_in < COPY_PROBE_FLOOR * peak / 2 or rate_seal < COPY_PROBE_FLOOR * peak)
                if shared.get("foreign_gpu_processes"):
                    rep["error"] = f"another process used the GPU meanwhile ({shared.get('gpu_share_check')})"
                elif low:
                    rep["error"] = f"under {COPY_PROBE_FLOOR:.0%} of the peak's rate"
                else:
                    rep["ok"] = peak > 0
                    rep["error"] = "" if peak > 0 else "the device reports no memory clock or bus width"
            except BaseException as e:  # noqa: BLE001
                rep["error"] = f"{type(e).__name__}: {e}"[:400]
            protocol.send(w, rep)
            os._exit(0)
        rep = _answer(r, w, pid, 120)
        sys.stderr.write(f"[calibrate] copies: {json.dumps(rep)}\n")
        return rep

    # ----- health -----------------------------------------------------------
    def health(self, job):
        """Known kernel in a fresh process; the device memory the sandbox's own
        processes hold back to baseline (device_memory.py: other tenants of
        the GPU are not counted)."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            rep = {"ok": False}
            try:
                dev = self.device
                if dev == "cuda":
                    torch.cuda.set_device(0)
                a = torch.arange(1 << 20, dtype=torch.float32, device=dev)
                b = (a * 2 + 1).sum().item()
                n = float(1 << 20)
                rep["ok"] = abs(b - (n * (n - 1) + n)) / (n * n) < 1e-5
                if dev == "cuda":
                    torch.cuda.synchronize()
                    procs, why_not = device_memory.processes(torch.cuda.get_device_properties(0))
                    free, total = torch.cuda.mem_get_info()
                    # While this process holds its context: NVML lists it.
                    rep["memory"] = device_memory.measure(total, free, procs, os.getpid(), os.getppid(),
                                                          why_not=self.tree_escape or why_not)
                    rep.update(free_bytes=free, total_bytes=total,
                               gpu_model=torch.cuda.get_device_name(0))
            except BaseException as e:  # noqa: BLE001
                rep["error"] = f"{type(e).__name__}: {e}"
            protocol.send(w, rep)
            os._exit(0)
        os.close(w)
        st = self.cont.supervise(pid, float(job.get("wall_seconds") or 60))
        rep = protocol.LineReader(r).read(timeout=1) or {"ok": False, "error": "probe died"}
        os.close(r)
        rep["timed_out"] = st["timed_out"]
        healthy = bool(rep.get("ok")) and not st["timed_out"]
        memory = rep.get("memory")
        if memory:
            rep["memory_rule"] = memory["rule"]
        if healthy and memory:
            # The first probe fixes the baseline; later ones must come back to it.
            if self.memory_baseline is None:
                self.memory_baseline = memory
            else:
                healthy, error = device_memory.check(self.memory_baseline, memory,
                                                     int(job.get("memory_slack_bytes") or (512 << 20)))
                if error:
                    rep["error"] = error
        rep["healthy"] = healthy
        rep["wall_ms"] = st["wall_ms"]
        # HarnessHealthReply's keys only: the worker rejects any other.
        keep = ("healthy", "ok", "error", "free_bytes", "total_bytes", "gpu_model", "wall_ms", "timed_out",
                "memory_rule")
        return {k: rep[k] for k in keep if k in rep}

    def _runner(self, kind):
        """The method that runs a job of `kind` on this zygote, or None."""
        cuda = self.device == "cuda"
        return {"verify": self.verify, "health": self.health,
                "isolation_probe": self.isolation_probe if cuda else None,
                "recorder_probe": self.recorder_probe if cuda and not self.profiler_error else None,
                "copy_probe": self.copy_probe if cuda else None}.get(kind)

    def serve(self):
        # Each line is a HarnessResult (sandbox/harness_protocol.proto): one
        # reply, under the key the job's kind names, or "zygote_error".
        hello = {"caps": self.caps, "profiler_error": self.profiler_error, "memory_cgroup_error": self.cgroup_error,
                 "torch": torch.__version__, "python": sys.version.split()[0], "pid": os.getpid()}
        protocol.send(_PROTO_OUT, {"hello": hello})
        self.reader = protocol.LineReader(0)  # also read by _relay_clock, mid-job
        while True:
            job = self.reader.read()
            if job is None:
                return
            kind = job.get("kind")
            run = self._runner(kind)
            try:
                rep = {kind: run(job)} if run else {
                    "zygote_error": f"unknown job kind {kind} (device {self.device})"}
            except Exception:  # noqa: BLE001
                # No reply: the worker gives a verify job INFRA_ERROR with this text.
                rep = {"zygote_error": "zygote: " + traceback.format_exc()[-1500:]}
            rep["job_id"] = job.get("job_id", "")
            protocol.send(_PROTO_OUT, valid_utf8(rep))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contain-lib", default=contain.default_lib_path())
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profiler-root", default="", help="directory holding profiler_service/harness")
    ap.add_argument("--memory-cgroup-parent", default="", help="cgroup v2 dir for per-candidate memory cgroups")
    ap.add_argument("--verify-cuda-lib", default="", help="libkernelrl_verify_cuda.so (digest, compare, GPU exchange)")
    for flag in ("--view-extra-ro", "--view-gpu-dev", "--view-gpu-ro"):  # SandboxConfig.view, ':'-joined
        ap.add_argument(flag, default=None)
    args = ap.parse_args()
    contain.configure_view(args.view_extra_ro, args.view_gpu_dev, args.view_gpu_ro)
    # Dumpable off: candidates (same uid) cannot read our memory via /proc.
    LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    Zygote(args.contain_lib, args.device, args.profiler_root, args.memory_cgroup_parent, args.verify_cuda_lib).serve()


if __name__ == "__main__":
    main()
