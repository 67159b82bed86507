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
(optionally backed by a cgroup v2 memory.max); the zygote turns the three
reports into one outcome."""
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

import torch  # noqa: E402  (after the fd shuffle, before any fork)

import candidate  # noqa: E402
import contain  # noqa: E402
import profiling  # noqa: E402
import protocol  # noqa: E402
import reference  # noqa: E402
import wire  # noqa: E402

LIBC = ctypes.CDLL(None, use_errno=True)

HACK_FLAGS = {"torch_op_in_forward", "monkey_patch", "threads_spawned", "guard_removed",
              "output_aliases_input", "output_tensor_subclass", "async_side_stream"}


def tail(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return contain.cut_note(size, n) + f.read().decode(errors="replace")
    except OSError:
        return ""


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
        path = os.path.join(d, "x.bin")
        t = torch.from_file(path, shared=True, size=16, dtype=torch.float32)
        t.copy_(xs[0].reshape(-1))
        reference.compare(xs[0], {"type": "Tensor", "layout": "torch.strided", "device": "cpu",
                                  "dtype": "torch.float32", "shape": [4, 4], "file": "x.bin"},
                          wire.RefSlots(d, "cpu"), 0, None, 1e-2, 1e-2)
    torch.isclose(xs[0], xs[0]).all()
    torch.unravel_index(torch.tensor(3), (4, 4))
    # Children initialise CUDA themselves; a zygote that did would poison them.
    if torch.cuda.is_initialized():
        raise RuntimeError("zygote warm-up initialised CUDA: forked children could not use it")


class Zygote:
    def __init__(self, lib_path, device, profiler_root="", kprof_lib="", cgroup_parent="", verify_cuda_lib=""):
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
        self.baseline_free = None
        self.cuda_iso = None
        self.calibration = []
        self.profiler_error = import_profiler(profiler_root)
        self.profile_thread_allowance = 0  # threads the CUDA timing machinery itself starts (calibrated)
        self.kprof_ok, self.kprof_error = False, "not a CUDA worker" if device != "cuda" else "no kprof_lib"
        warm_up()
        if device == "cuda":
            self.calibrate()
            if kprof_lib and not self.profiler_error:
                self.kprof_ok, self.kprof_error = self.probe_recorder(kprof_lib)

    # ----- verify -----------------------------------------------------------
    def verify(self, job):
        t0 = time.perf_counter()
        job["t0_mono"] = time.monotonic()  # both children report their timelines against it
        # Asked for by the worker AND allowed by this host.
        needs = {"readonly_root": "ro_remount", "mount_proc": "proc_mount", "new_root": "pivot_root"}
        iso = {k: bool(v) and self.caps.get(needs.get(k, k), True) for k, v in job["isolation"].items()}
        for k, allowed in (self.cuda_iso or {}).items():
            iso[k] = bool(iso.get(k, True)) and allowed
        job["isolation"] = iso
        if job.get("profile") and (self.profiler_error or not self.kprof_ok):
            job["kprof_lib"] = ""  # host refused CUPTI under seccomp at start (logged): events only
        job["profile_thread_allowance"] = self.profile_thread_allowance if job.get("kprof_lib") else 0
        if job.get("profile") and self.profiler_error:
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

        ref_pid = os.fork()
        if ref_pid == 0:
            self._child_reference(job, r2c[1], c2r[0], res[1], ref_log, xref.fileno())
        sup_pid = os.fork()
        if sup_pid == 0:
            self._child_supervisor(job, c2r[1], r2c[0], sup[1], cand_log, cgroup, xcand.fileno())
        for fd in (c2r[0], c2r[1], r2c[0], r2c[1], res[1], sup[1]):
            os.close(fd)
        xref.close()
        xcand.close()
        status = protocol.LineReader(sup[0]).read(timeout=job["wall_seconds"] + 60) or {}
        ref = protocol.LineReader(res[0]).read(timeout=60) or {}
        for fd in (sup[0], res[0]):
            os.close(fd)
        for pid in (ref_pid, sup_pid):
            try:
                os.kill(pid, signal.SIGKILL) if os.waitpid(pid, os.WNOHANG)[0] == 0 else None
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
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
        outcome = self.decide(job, status, ref)
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
    def _collect_profile(job, prof):
        """The trusted side's profile record. The measurement was assembled and
        written into the trusted dir by the reference process (never by the
        candidate's)."""
        keep = ("started", "ok", "error", "wall_ms", "rechecks", "recheck_failures", "detail", "measurement_file")
        prof = {k: prof[k] for k in keep if k in prof}
        if prof.get("started") and not prof.get("measurement_file"):
            prof["detail"] = (prof.get("detail") or "") + " no measurement"
        return prof

    def _child_reference(self, job, to_cand, from_cand, result_fd, log_path, xsock):
        code = 1
        try:
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            pol = contain.make_policy({}, parent_death_signal=signal.SIGKILL,
                                      keep_fds=[to_cand, from_cand, result_fd, xsock])
            self.cont.phase(pol, 2)
            code = reference.run(job, to_cand, from_cand, result_fd, xsock)
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
            pol1 = contain.make_policy(iso, contain.confine_fields(job, iso, self.caps, self.device),
                                       parent_death_signal=signal.SIGKILL, new_process_group=1)
            # Opened before the new mount namespace exists: an fd open for
            # writing on one of its mounts would make the read-only remount EBUSY.
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            _, log1 = self.cont.phase(pol1, 1)
            pid = os.fork()
            if pid == 0:
                self._child_candidate(job, to_ref, from_ref, log_fd, xsock)
            for fd in (to_ref, from_ref, log_fd, xsock):
                os.close(fd)
            st = self.cont.supervise(pid, job["wall_seconds"], int(job.get("resident_memory_bytes") or 0),
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
            pol2 = contain.make_policy(
                iso, contain.confine_fields(job, iso, self.caps, self.device), parent_death_signal=signal.SIGKILL,
                readonly_root=int(iso.get("readonly_root", False)),
                mount_proc=int(iso.get("mount_proc", False) and iso.get("pid_ns", False)),
                scratch_dir=job["scratch_dir"], scratch_bytes=int(job["scratch_bytes"]),
                writable_dirs=job["exchange_dir"], hidden_dirs=job["trusted_dir"],
                data_bytes=int(job["host_memory_bytes"]) if iso.get("data_limit", True) else 0,
                fsize_bytes=int(job["exchange_bytes"]),
                nofile=4096, core_bytes_plus1=1,
                keep_fds=[to_ref, from_ref, xsock, 1, 2])
            _, log2 = self.cont.phase(pol2, 2)
            sys.stderr.write("[contain] " + log2.replace("\n", "\n[contain] ") + "\n")
            os.environ["TMPDIR"] = job["scratch_dir"]
            os.environ["HOME"] = job["scratch_dir"]
            code = candidate.run(job, self.cont, to_ref, from_ref, xsock)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)

    @staticmethod
    def decide(job, st, ref):
        flags = set(ref.get("candidate_flags", []))
        err = ref.get("candidate_error") or {}
        details = [d for d in ref.get("details", []) if d]
        sets = ref.get("sets", [])
        n = int(job["num_sets"])
        sig = st.get("signal", 0)
        msg = (err.get("message") or "").strip().splitlines()
        last = msg[-1] if msg else ""

        def out(outcome, summary, extra=()):
            return {"outcome": outcome, "summary": contain.cap_head(summary, 500), "flags": sorted(flags | set(extra)),
                    "sets_passed": sum(1 for s in sets if s["ok"]), "sets": sets}

        if ref.get("ref_error"):
            return out("INFRA_ERROR", "reference failed: " + ref["ref_error"].strip().splitlines()[-1])
        if sig == signal.SIGSYS:
            when = " while being profiled" if (ref.get("profile") or {}).get("started") else ""
            return out("SANDBOX_VIOLATION", f"killed by seccomp (SIGSYS){when}: forbidden system call "
                       "(process creation, network socket, ptrace, mount...)", ["seccomp_kill"])
        if err.get("kind") == "violation":
            return out("SANDBOX_VIOLATION", "sandbox violation: " + "; ".join(err.get("audit") or [last]),
                       ["audit_violation"])
        hacks = flags & HACK_FLAGS
        if hacks or err.get("kind") == "torch_op":
            what = ", ".join(sorted(hacks | ({"torch_op_in_forward"} if err.get("kind") == "torch_op" else set())))
            extra = "; ".join(details[:2] + ([", ".join(err.get("torch_ops") or [])] if err.get("torch_ops") else []))
            return out("HACK_DETECTED", f"{what}" + (f" ({extra})" if extra else ""),
                       ["torch_op_in_forward"] if err.get("kind") == "torch_op" else [])
        if st.get("memory_exceeded"):
            cap = int(job.get("resident_memory_bytes") or 0)
            return out("CRASH", f"host memory {fmt_bytes(st.get('memory_at_kill_bytes', 0))} > cap {fmt_bytes(cap)}: "
                       "killed (resident memory of the candidate's processes; the watchdog killed the process group)",
                       ["host_memory_cap"])
        if st.get("cgroup_oom_kills", 0) > 0:
            limit = int(job.get("cgroup_memory_bytes") or 0)
            return out("CRASH", f"host memory over the candidate cgroup's memory.max ({fmt_bytes(limit)}): killed by "
                       "the kernel OOM killer", ["host_memory_cap"])
        if st.get("timed_out"):
            return out("TIMEOUT", f"verify ran past its {job['wall_seconds']:g} s wall limit (process group killed)")
        if sig == signal.SIGXCPU:
            return out("TIMEOUT", "CPU-time limit reached (SIGXCPU)")
        if err.get("kind") == "cuda" or (err.get("kind") == "kernel_error" and job["device"] == "cuda"):
            return out("CUDA_ERROR", "CUDA error: " + last)
        if err.get("kind") == "oom":
            return out("CRASH", "out of memory: " + last, ["oom"])
        if err:
            return out("CRASH", f"{err.get('stage')} raised: {last}")
        if sig:
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            hint = " (memory limit or OOM killer)" if sig == signal.SIGKILL else ""
            return out("CRASH", f"candidate killed by {name}{hint}")
        if ref.get("mutated") or (ref.get("profile") or {}).get("mutated"):
            return out("WRONG_ANSWER", "forward modified its inputs", ["input_mutation"])
        failed = [s for s in sets if not s["ok"]]
        if failed:
            return out("WRONG_ANSWER", failed[0]["detail"])
        prof = ref.get("profile") or {}
        if prof.get("recheck_failures"):
            return out("WRONG_ANSWER", f"re-check of a timed call failed ({prof['recheck_failures']} of "
                       f"{prof['rechecks']}): {prof.get('detail', '')}", ["recheck_failed"])
        if st.get("exit_code", 0) not in (0, None) and len(sets) < n:
            return out("CRASH", f"candidate exited with code {st.get('exit_code')}")
        if len(sets) == n and all(s["ok"] for s in sets) and ref.get("candidate_done"):
            return out("OK", f"correct on {n} input sets ({', '.join(s['dist'] for s in sets)})")
        if len(sets) < n:
            return out("CRASH", f"candidate stopped after {len(sets)} of {n} input sets"
                       + (": " + details[-1] if details else ""))
        if prof.get("started"):
            return out("CRASH", "candidate stopped while being profiled"
                       + (": " + prof["detail"] if prof.get("detail") else ""))
        return out("INFRA_ERROR", "verify ended without a complete report")

    # ----- isolation calibration ---------------------------------------------
    FULL = {"user_ns": True, "pid_ns": True, "net_ns": True, "mount_ns": True, "ipc_ns": True,
            "readonly_root": True, "mount_proc": True, "seccomp": True, "data_limit": True, "new_root": True,
            "identity": True}
    # Tried in order; the first under which CUDA works is used for every job.
    # Each drop is logged: the host decides what degrades, not the candidate.
    DROPS = [[], ["new_root", "identity"], ["data_limit"], ["mount_proc"], ["user_ns"], ["user_ns", "mount_proc"],
             ["user_ns", "mount_proc", "data_limit"], ["readonly_root", "mount_proc", "mount_ns"],
             ["user_ns", "pid_ns", "mount_proc"], ["user_ns", "pid_ns", "mount_ns", "readonly_root", "mount_proc"],
             ["user_ns", "pid_ns", "mount_ns", "readonly_root", "mount_proc", "ipc_ns", "net_ns", "data_limit",
              "new_root", "identity"]]

    # Each group is probed alone first (a step with the steps it needs), so the
    # log names the exact step CUDA cannot run under on this host, and every
    # step it tolerates stays on.
    GROUPS = [["user_ns"], ["pid_ns"], ["net_ns"], ["ipc_ns"], ["mount_ns"], ["mount_ns", "readonly_root"],
              ["pid_ns", "mount_ns", "mount_proc"], ["seccomp"], ["data_limit"], ["mount_ns", "new_root"],
              ["identity"]]

    def _allowed(self, iso):
        needs = {"readonly_root": "ro_remount", "mount_proc": "proc_mount", "new_root": "pivot_root"}
        return {k: v and self.caps.get(needs.get(k, k), True) for k, v in iso.items()}

    def calibrate(self):
        import tempfile
        root = tempfile.mkdtemp(prefix="kernelrl-calib-")
        tolerated = set()
        for group in self.GROUPS:
            iso = self._allowed({k: k in group for k in self.FULL})
            ok, err = self._cuda_probe(iso, root)
            self.calibration.append({"alone": group, "ok": ok, "error": err[-400:]})
            sys.stderr.write(f"[calibrate] alone={group} ok={ok} {err[-300:]}\n")
            if ok:
                tolerated.update(group)
        if tolerated and tolerated != set(self.FULL):
            iso = self._allowed({k: k in tolerated for k in self.FULL})
            ok, err = self._cuda_probe(iso, root)
            self.calibration.append({"together": sorted(tolerated), "ok": ok, "error": err[-400:]})
            sys.stderr.write(f"[calibrate] together={sorted(tolerated)} ok={ok} {err[-300:]}\n")
            if ok:
                self.cuda_iso = iso
                return
        for drop in self.DROPS:
            iso = self._allowed({k: k not in drop for k in self.FULL})
            ok, err = self._cuda_probe(iso, root)
            self.calibration.append({"dropped": drop, "ok": ok, "error": err[-400:]})
            sys.stderr.write(f"[calibrate] drop={drop} ok={ok} {err[-300:]}\n")
            if ok:
                self.cuda_iso = iso
                return
        self.cuda_iso = {k: False for k in self.FULL}

    def probe_recorder(self, kprof_lib):
        """CUDA with the CUPTI recorder injected, under the isolation CUDA was
        calibrated for, seccomp included, through one full timing cycle of the
        profiler's CUDA backend (flush, window, NVML, anchor, report). Returns
        (ok, error). Not ok: profiled jobs run without injection (CUDA-event
        timing, flag cupti_inactive) and the worker logs a warning."""
        import tempfile
        ok, err = self._cuda_probe(dict(self.cuda_iso or {}), tempfile.mkdtemp(prefix="kernelrl-kprof-"),
                                   recorder=kprof_lib)
        self.calibration.append({"recorder": kprof_lib, "ok": ok, "error": err[-400:]})
        sys.stderr.write(f"[calibrate] CUPTI recorder {kprof_lib} under the candidate isolation: ok={ok} {err[-300:]}\n")
        if ok and err.startswith("threads+"):
            self.profile_thread_allowance = int(err.split("+")[1].split()[0])
        return ok, err

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
        report = backend.report()  # also counts the executor's warm window (CallTimer), hence >= 1
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
                self.cont.phase(contain.make_policy(iso, view, parent_death_signal=signal.SIGKILL, new_process_group=1), 1)
                pid = os.fork()
                if pid == 0:
                    msg = {"ok": False, "error": ""}
                    try:
                        pol2 = contain.make_policy(
                            iso, view, parent_death_signal=signal.SIGKILL,
                            readonly_root=int(iso.get("readonly_root", False) and iso.get("mount_ns", False)),
                            mount_proc=int(iso.get("mount_proc", False) and iso.get("pid_ns", False)
                                           and iso.get("mount_ns", False)),
                            scratch_dir=job["scratch_dir"], scratch_bytes=job["scratch_bytes"],
                            writable_dirs=job["exchange_dir"], hidden_dirs=job["trusted_dir"],
                            data_bytes=job["host_memory_bytes"] if iso.get("data_limit") else 0,
                            nofile=4096, core_bytes_plus1=1, keep_fds=[w, 2])
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
        os.close(w)
        rep = protocol.LineReader(r).read(timeout=90) or {"ok": False, "error": "no answer"}
        os.close(r)
        try:
            os.waitpid(sup, 0)
        except ChildProcessError:
            pass
        return bool(rep.get("ok")), str(rep.get("error", ""))

    # ----- health -----------------------------------------------------------
    def health(self, job):
        """Known kernel in a fresh process; device memory back to baseline."""
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
                    free, total = torch.cuda.mem_get_info()
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
        if healthy and "free_bytes" in rep:
            # The first probe fixes the baseline; later ones must come back to it.
            if self.baseline_free is None:
                self.baseline_free = rep["free_bytes"]
            elif self.baseline_free - rep["free_bytes"] > int(job.get("memory_slack_bytes") or (512 << 20)):
                healthy = False
                rep["error"] = (f"device memory not back to baseline: "
                                f"{(self.baseline_free - rep['free_bytes']) >> 20} MiB still used")
        rep["healthy"] = healthy
        rep["wall_ms"] = st["wall_ms"]
        return rep

    def serve(self):
        dropped = sorted(k for k, v in (self.cuda_iso or {}).items() if not v)
        hello = {"type": "hello", "caps": self.caps, "cuda_initialized": torch.cuda.is_initialized(),
                 "profiler_error": self.profiler_error, "kprof_ok": self.kprof_ok,
                 "kprof_error": "" if self.kprof_ok else self.kprof_error,
                 "memory_cgroup_error": self.cgroup_error,
                 "isolation_dropped_for_cuda": dropped, "calibration": self.calibration, "torch": torch.__version__,
                 "python": sys.version.split()[0], "pid": os.getpid()}
        protocol.send(_PROTO_OUT, hello)
        reader = protocol.LineReader(0)
        while True:
            job = reader.read()
            if job is None:
                return
            try:
                if job.get("kind") == "verify":
                    rep = self.verify(job)
                elif job.get("kind") == "health":
                    rep = self.health(job)
                else:
                    rep = {"error": f"unknown job kind {job.get('kind')}"}
            except Exception:  # noqa: BLE001
                rep = {"outcome": "INFRA_ERROR", "summary": "zygote: " + traceback.format_exc()[-1500:]}
            rep["job_id"] = job.get("job_id", "")
            protocol.send(_PROTO_OUT, rep)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contain-lib", default=contain.default_lib_path())
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profiler-root", default="", help="directory holding profiler_service/harness")
    ap.add_argument("--kprof-lib", default="", help="libkprof.so (CUPTI recorder) for profiled CUDA jobs")
    ap.add_argument("--memory-cgroup-parent", default="", help="cgroup v2 dir for per-candidate memory cgroups")
    ap.add_argument("--verify-cuda-lib", default="", help="libkernelrl_verify_cuda.so (digest, compare, GPU exchange)")
    args = ap.parse_args()
    # Dumpable off: candidates (same uid) cannot read our memory via /proc.
    LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    Zygote(args.contain_lib, args.device, args.profiler_root, args.kprof_lib, args.memory_cgroup_parent,
           args.verify_cuda_lib).serve()


if __name__ == "__main__":
    main()
