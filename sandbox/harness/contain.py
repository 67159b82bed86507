"""ctypes bridge to libkernelrl_contain.so: the harness forks, the C++ library
isolates (sandbox/contain/contain.h holds the sequence and its rationale)."""
import ctypes
import glob
import os
import sys
import sysconfig

KR_SECCOMP_NONE, KR_SECCOMP_CANDIDATE, KR_SECCOMP_COMPILER = 0, 1, 2

# The identity candidates and compilers run as (sandbox/contain/identity.cc).
SANDBOX_UID = SANDBOX_GID = 65534


class KrPolicy(ctypes.Structure):
    # Mirrors sandbox/contain/policy.h; check_layout compares it with the
    # library's own layout when Contain loads, and refuses a mismatch.
    _fields_ = [
        ("user_ns", ctypes.c_int), ("pid_ns", ctypes.c_int), ("net_ns", ctypes.c_int),
        ("mount_ns", ctypes.c_int), ("ipc_ns", ctypes.c_int), ("uts_ns", ctypes.c_int),
        ("readonly_root", ctypes.c_int), ("mount_proc", ctypes.c_int),
        ("scratch_dir", ctypes.c_char_p), ("scratch_bytes", ctypes.c_longlong),
        ("writable_dirs", ctypes.c_char_p), ("hidden_dirs", ctypes.c_char_p),
        ("cpu_seconds", ctypes.c_longlong), ("data_bytes", ctypes.c_longlong),
        ("as_bytes", ctypes.c_longlong), ("fsize_bytes", ctypes.c_longlong),
        ("nofile", ctypes.c_longlong), ("core_bytes_plus1", ctypes.c_longlong),
        ("close_fds", ctypes.c_int), ("keep_fds", ctypes.POINTER(ctypes.c_int)),
        ("num_keep_fds", ctypes.c_int),
        ("new_process_group", ctypes.c_int), ("parent_death_signal", ctypes.c_int),
        ("seccomp_profile", ctypes.c_int),
        ("new_root", ctypes.c_int), ("root_dir", ctypes.c_char_p), ("ro_paths", ctypes.c_char_p),
        ("job_ro_dirs", ctypes.c_char_p), ("dev_paths", ctypes.c_char_p),
        ("run_as_uid", ctypes.c_int), ("run_as_gid", ctypes.c_int),
    ]


class KrSuperviseResult(ctypes.Structure):
    # Field order mirrors KrSuperviseResult in sandbox/contain/c_api.cc.
    _fields_ = [
        ("exit_code", ctypes.c_int), ("term_signal", ctypes.c_int), ("timed_out", ctypes.c_int),
        ("memory_exceeded", ctypes.c_int), ("wall_ms", ctypes.c_double), ("cpu_ms", ctypes.c_double),
        ("memory_at_kill_bytes", ctypes.c_longlong), ("peak_memory_bytes", ctypes.c_longlong),
        ("memory_samples", ctypes.c_int),
    ]


class LayoutError(RuntimeError):
    """The ctypes mirror and the library disagree on KrPolicy's layout."""


def check_layout(lib, struct=KrPolicy):
    """Fails closed: the library would read namespaces, limits and paths from
    the wrong bytes of a mirror whose size or any field offset differs."""
    lib.kr_policy_size.restype = ctypes.c_int
    lib.kr_policy_offset.restype = ctypes.c_int
    lib.kr_policy_offset.argtypes = [ctypes.c_char_p]
    if ctypes.sizeof(struct) != lib.kr_policy_size():
        raise LayoutError(f"KrPolicy is {lib.kr_policy_size()} bytes in the library, "
                          f"{ctypes.sizeof(struct)} in contain.py")
    lib.kr_policy_field_count.restype = ctypes.c_int
    if len(struct._fields_) != lib.kr_policy_field_count():
        raise LayoutError(f"KrPolicy has {lib.kr_policy_field_count()} fields in the library, "
                          f"{len(struct._fields_)} in contain.py")
    for name, _ in struct._fields_:
        theirs, ours = lib.kr_policy_offset(name.encode()), getattr(struct, name).offset
        if theirs != ours:
            raise LayoutError(f"KrPolicy.{name} at offset {theirs} in the library, {ours} in contain.py")


class Contain:
    """Loads the library once (in the zygote, before any fork)."""

    def __init__(self, lib_path):
        self.lib = ctypes.CDLL(lib_path)
        check_layout(self.lib)
        # Capability names by bit, and what each isolation step needs of them:
        # the library's table (sandbox/contain/roles.h), not a copy here.
        self.lib.kr_capability_name.restype = ctypes.c_char_p
        self.lib.kr_step_allowed.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.cap_bits = {}
        while (name := self.lib.kr_capability_name(len(self.cap_bits))) is not None:
            self.cap_bits[name.decode()] = 1 << len(self.cap_bits)
        self.lib.kr_contain_phase.restype = ctypes.c_int
        self.lib.kr_contain_phase.argtypes = [ctypes.POINTER(KrPolicy), ctypes.c_int,
                                              ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_probe_host.restype = ctypes.c_int
        self.lib.kr_supervise.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.c_longlong, ctypes.c_double,
                                          ctypes.c_int, ctypes.POINTER(KrSuperviseResult)]
        self.lib.kr_cgroup_probe.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_cgroup_create.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_longlong,
                                              ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_cgroup_enter.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_cgroup_remove.restype = ctypes.c_longlong
        self.lib.kr_cgroup_remove.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_longlong)]
        self.lib.kr_default_view.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        # View lists the worker did not hand us: the library's defaults.
        for key, which in (("gpu_dev", 0), ("gpu_ro", 1)):
            if _VIEW.get(key) is None:
                _VIEW[key] = self.default_view(which)

    def default_view(self, which):
        """kr_default_view: 0 = GPU device paths, 1 = GPU read-only paths
        (sandbox/contain/view_defaults.cc, the one place they are kept)."""
        buf = ctypes.create_string_buffer(8192)
        self.lib.kr_default_view(which, buf, len(buf))
        return [p for p in buf.value.decode().split(":") if p]

    def probe(self):
        caps = self.lib.kr_probe_host()
        return {name: bool(caps & bit) for name, bit in self.cap_bits.items()}

    def step_allowed(self, step, caps):
        """Whether a host with `caps` (probe()'s dict) can apply isolation step
        `step`. A capability the dict does not name is absent; an unknown step
        is not allowed."""
        bits = sum(bit for name, bit in self.cap_bits.items() if caps.get(name, False))
        return bool(self.lib.kr_step_allowed(step.encode(), bits))

    def candidate_policy(self, iso, caps, view=None, **fields):
        """A candidate's KrPolicy: the switches (namespaces, read-only root,
        /proc, constructed root, seccomp profile, identity) from the library's
        role table for the steps `iso` asks and `caps` allows; then the
        job's paths and limits (`view` from confine_fields, then `fields`)."""
        self.lib.kr_policy_for.argtypes = [ctypes.c_int] * 5 + [ctypes.POINTER(KrPolicy)]
        self.lib.kr_step_bit.argtypes = [ctypes.c_char_p]
        steps = sum(self.lib.kr_step_bit(k.encode()) for k, v in iso.items() if v)
        bits = sum(bit for name, bit in self.cap_bits.items() if caps.get(name, False))
        p = KrPolicy()
        if self.lib.kr_policy_for(_ROLE_CANDIDATE, bits, steps, 0, 1, ctypes.byref(p)) != 0:
            raise LayoutError("kr_policy_for refused the candidate role")
        return _overlay(p, {**(view or {}), **fields})

    def allowed_isolation(self, iso, caps):
        """The job's isolation switches with each step the host cannot apply off."""
        return {k: bool(v) and self.step_allowed(k, caps) for k, v in iso.items()}

    def phase(self, policy, phase):
        """Runs one phase; returns (failures, step log text)."""
        buf = ctypes.create_string_buffer(65536)
        failures = self.lib.kr_contain_phase(ctypes.byref(policy), phase, buf, len(buf))
        return failures, buf.value.decode(errors="replace")

    def supervise(self, pid, wall_seconds, memory_cap_bytes=0, memory_poll_ms=10.0, proc_fd=-1):
        """Waits for `pid` with a wall limit and, with memory_cap_bytes > 0, a cap
        on the resident host memory of its process tree (both kill the group).
        proc_fd: /proc opened before the fork (the candidate remounts /proc)."""
        r = KrSuperviseResult()
        self.lib.kr_supervise(pid, wall_seconds, int(memory_cap_bytes), float(memory_poll_ms), proc_fd,
                              ctypes.byref(r))
        return {"exit_code": r.exit_code, "signal": r.term_signal, "timed_out": bool(r.timed_out),
                "memory_exceeded": bool(r.memory_exceeded), "memory_at_kill_bytes": r.memory_at_kill_bytes,
                "peak_memory_bytes": r.peak_memory_bytes, "memory_samples": r.memory_samples,
                "wall_ms": r.wall_ms, "cpu_ms": r.cpu_ms}

    # cgroup v2 memory backstop (sandbox/contain/host_memory.h).
    def cgroup_probe(self, parent):
        """"" when candidates can get a memory cgroup under `parent`, else why not."""
        why = ctypes.create_string_buffer(512)
        rc = self.lib.kr_cgroup_probe(parent.encode(), why, len(why))
        return "" if rc == 0 else (why.value.decode(errors="replace") or "unknown error")

    def cgroup_create(self, parent, name, max_bytes):
        """(path, "") or ("", why)."""
        path, why = ctypes.create_string_buffer(4096), ctypes.create_string_buffer(512)
        rc = self.lib.kr_cgroup_create(parent.encode(), name.encode(), int(max_bytes), path, len(path), why, len(why))
        return (path.value.decode(), "") if rc == 0 else ("", why.value.decode(errors="replace"))

    def cgroup_enter(self, path):
        why = ctypes.create_string_buffer(512)
        return "" if self.lib.kr_cgroup_enter(path.encode(), why, len(why)) == 0 else why.value.decode(errors="replace")

    def cgroup_remove(self, path):
        """Removes the cgroup; returns (oom_kill count or -1, memory.peak or -1)."""
        peak = ctypes.c_longlong(-1)
        kills = self.lib.kr_cgroup_remove(path.encode(), ctypes.byref(peak))
        return kills, peak.value


_ROLE_CANDIDATE = 3  # kr_policy_for's role number (c_api.cc)


def make_policy(iso, view=None, **fields):
    """KrPolicy for the harness's own processes (the reference, seccomp-only
    phases): namespaces from iso (dict name -> bool) plus fields; `view`
    (confine_fields) adds a constructed root and an identity, explicit fields
    win. A candidate's comes from Contain.candidate_policy (the role table).
    The returned object keeps the byte strings it points to alive."""
    p = KrPolicy()
    for ns in ("user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns", "uts_ns"):
        setattr(p, ns, int(bool(iso.get(ns, False))))
    return _overlay(p, {**(view or {}), **fields})


def _overlay(p, fields):
    """Sets `fields` on KrPolicy p (strings encoded and kept alive; keep_fds
    as an array, which turns close_fds on)."""
    fields = dict(fields)
    keep = fields.pop("keep_fds", None)
    p._keep_alive = []
    for key, value in fields.items():
        if isinstance(value, str):
            value = value.encode()
            p._keep_alive.append(value)
        setattr(p, key, value)
    if keep is not None:
        arr = (ctypes.c_int * len(keep))(*keep)
        p._keep_alive.append(arr)
        p.keep_fds = arr
        p.num_keep_fds = len(keep)
        p.close_fds = 1
    return p


# The constructed root's configured paths (SandboxConfig.view): extra
# read-only paths for every job; on GPU jobs the driver's device nodes (glob
# patterns allowed) and its sysfs/run entries. The worker resolves and checks
# its config (sandbox/filesystem_view.h) and passes the lists on the zygote's
# command line (configure_view); a list it did not pass takes the library's
# defaults when Contain loads (sandbox/contain/view_defaults.cc).
_VIEW = {"extra_ro": [], "gpu_dev": None, "gpu_ro": None}


def configure_view(extra_ro=None, gpu_dev=None, gpu_ro=None):
    """Lists as ':'-joined strings (or lists); None keeps the default."""
    for key, value in (("extra_ro", extra_ro), ("gpu_dev", gpu_dev), ("gpu_ro", gpu_ro)):
        if value is not None:
            _VIEW[key] = [p for p in (value.split(":") if isinstance(value, str) else value) if p]


def view_paths():
    """(extra read-only paths, GPU device paths with globs expanded, GPU read-only paths)."""
    dev = []
    for pattern in _VIEW["gpu_dev"] or []:
        dev += sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    return list(_VIEW["extra_ro"]), dev, list(_VIEW["gpu_ro"] or [])


def candidate_env(job):
    """Variables the trusted side sets in a candidate before its CUDA init.
    Its temp files and home are the scratch tmpfs; CUDA's JIT cache
    (~/.nv/ComputeCache by default) is off: the scratch is fresh per job, so a
    cache would never be reused, and with it off the driver writes nothing
    there (the one path CUDA writes besides its device nodes and, during
    cuInit, its threads' names in /proc/<pid>/task/<tid>/comm)."""
    scratch = job["scratch_dir"]
    env = {"TMPDIR": scratch, "HOME": scratch, "CUDA_CACHE_DISABLE": "1",
           "CUDA_CACHE_PATH": os.path.join(scratch, ".nv", "ComputeCache")}
    if job.get("baseline") == "compiled" and not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        # A baseline executor (trusted code, no isolation) keeps torch.compile's
        # cache where this user's is, not in the fresh scratch: a task compiled
        # before is not compiled again.
        import getpass
        import tempfile
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "torchinductor_" + getpass.getuser())
    return env

_PYTHON_VIEW = (-1, None)  # (len(sys.modules) it was computed at, the paths)


def python_view():
    """Host paths this interpreter needs in a constructed root, from where it
    and what it imported live: its library dirs, the dir of every imported
    module (torch, the harness, the profiler harness; both as named and
    resolved, for symlink trees like Bazel runfiles), the dir of every shared
    object mapped, and LD_LIBRARY_PATH. The C++ plan drops the ones inside
    another and refuses any that contains a job's directories.

    Computed again only when the number of imported modules changed: the
    zygote calls it before each fork, so its children inherit it (walking
    torch's thousands of modules took ~140 ms in every job's supervisor, on
    the way to the candidate's start)."""
    global _PYTHON_VIEW
    if _PYTHON_VIEW[0] != len(sys.modules):
        count = len(sys.modules)
        paths = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        paths += [p for p in sys.path if p.endswith(("site-packages", "dist-packages", "lib-dynload"))]
        for mod in list(sys.modules.values()):
            f = getattr(mod, "__file__", None)
            if isinstance(f, str) and os.path.isabs(f):
                paths += [os.path.dirname(f), os.path.dirname(os.path.realpath(f))]
        try:
            with open("/proc/self/maps") as maps:
                for line in maps:
                    path = line.split(None, 5)[-1].strip()
                    if path.startswith("/") and ".so" in os.path.basename(path) and not path.endswith("(deleted)"):
                        paths.append(os.path.dirname(path))
        except OSError:
            pass
        paths += os.environ.get("LD_LIBRARY_PATH", "").split(":")
        _PYTHON_VIEW = (count, sorted({p for p in paths if p and os.path.isabs(p) and os.path.exists(p)}))
    return _PYTHON_VIEW[1]


def job_read_dirs(job):
    """The job's own dirs the candidate reads: its workspace, its compiled
    artifacts and the public copy of the task's model.py (never trusted/)."""
    dirs = [job.get("workspace_dir"), job.get("artifact_dir")]
    dirs += [os.path.dirname(job[k]) for k in ("public_model",) if job.get(k)]
    return [d for d in dirs if d]


def confine_fields(job, iso, caps=None, device="cpu"):
    """The KrPolicy fields of a candidate's constructed root and identity, for
    both phases (phase 1 logs the view, phase 2 builds it): its workspace and
    artifact dirs, the Python/torch install, the harness libraries the job
    names, on GPU jobs the driver's nodes and sysfs; the exchange dir writable,
    the scratch. Each part is off when the job's isolation says so or the
    host's probe (caps) lacks it; a capability caps does not name is absent."""
    caps = caps or {}
    fields = {}
    if iso.get("identity", True) and (caps.get("host_identity", False) or caps.get("user_ns", False)):
        fields.update(run_as_uid=SANDBOX_UID, run_as_gid=SANDBOX_GID)
    if not (iso.get("new_root", True) and iso.get("mount_ns", True) and caps.get("pivot_root", False)):
        return fields
    libs = [p for p in (job.get("kprof_lib"), job.get("verify_cuda_lib")) if p]
    extra_ro, gpu_dev, gpu_ro = view_paths()
    ro = list(python_view()) + sorted({os.path.dirname(q) for p in libs for q in (p, os.path.realpath(p))})
    ro += extra_ro
    dev = []
    if device == "cuda":
        ro += gpu_ro
        dev = gpu_dev
    fields.update(new_root=1, ro_paths=":".join(ro), dev_paths=":".join(dev),
                  job_ro_dirs=":".join(job_read_dirs(job)),
                  scratch_dir=job["scratch_dir"], scratch_bytes=int(job.get("scratch_bytes") or 0),
                  writable_dirs=job["exchange_dir"],
                  mount_proc=int(bool(iso.get("mount_proc", True) and iso.get("pid_ns", True))))
    return fields


# Bounded echo (sandbox/contain/echo.h, same wording): text the candidate
# produced is capped wherever it is quoted, and a cut copy says so.
def cap_head(text, n):
    return text if len(text) <= n else text[:n] + f" [... {len(text) - n} bytes cut]"


def cut_note(size, n):
    """The line a tail of `n` out of `size` bytes starts with ("" when whole)."""
    return f"[{size - n} bytes cut ...]\n" if size > n else ""


def default_lib_path():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("KERNELRL_CONTAIN_LIB", os.path.join(here, "libkernelrl_contain.so"))
