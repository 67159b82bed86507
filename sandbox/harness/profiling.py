"""The profile stage (docs/HARNESS.md): the timing protocol runs in the
reference process (trusted); the candidate process only executes calls.

Reference process (run_profile): after every verify call passed, it drives
the profiler's protocol (profiler_service.harness.protocol.run_protocol) with
a RemoteBackend whose "callable" is one call to the executor:
  make_inputs  fresh set k = get_inputs() under timing_seed(secret, k), in the
               reference's memory (kept to re-check the call), then written
               into the call's input slots when the call starts;
  prepare      L2 flush on the device from this process (the L2 is shared by
               every context), then a sync;
  call         send -> reply; the outside clock (host, this process) spans it;
  end          the sample: the executor's in-process figures (CUPTI sum,
               events, wall: evidence) + outside_us (trusted) + NVML (read here);
  recheck      decided by this process's RNG after the call returned, at
               least min_rechecks per run: Model on our copy of the inputs,
               compared with the output slots;
  anchor       a device copy timed by events in this process.
The ProfileMeasurement is assembled here and written to the trusted dir; the
C++ worker judges it (JudgeProfile), bounding every in-process figure by the
outside clock.

Candidate process (CallTimer): the same window around every call: persisting
L2 reset, sync, CUPTI window + events, forward, device-wide sync, close.
"""
import glob
import hashlib
import json
import os
import secrets
import time

import torch

import inputs as inputs_lib

MEASUREMENT_FILE = "profile_measurement.json"
SAMPLE_FIELDS = ("cupti_us", "event_us", "wall_us", "num_activities", "gpu_busy_us")


def timing_seed(profile_seed, k):
    """Seed of the k-th timing input set."""
    digest = hashlib.sha256(f"{int(profile_seed)}:{int(k)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


# ----- candidate process ------------------------------------------------------

def recorder_path(job):
    if job.get("profile") and job.get("device") == "cuda" and job.get("kprof_lib"):
        return job["kprof_lib"]
    return ""


def inject_recorder(job):
    """Before CUDA init: the driver loads the CUPTI recorder at cuInit."""
    path = recorder_path(job)
    if path:
        os.environ["CUDA_INJECTION64_PATH"] = path
        os.environ["KERNELRL_KPROF_LIB"] = path
    return path


def timing_modules(job):
    """The profiler's modules loaded in the candidate process: part of its
    monkey-patch snapshot (evidence only; nothing they hold decides)."""
    import sys
    names = ("kprof", "backends", "nvml")
    mods = [sys.modules.get(f"profiler_service.harness.{n}") for n in names]
    return [m for m in mods if m is not None]


class CallTimer:
    """The executor's window around each call. Identical for every call."""

    def __init__(self, job):
        self.device = job["device"]
        self.kprof = None
        self.note = "no recorder"
        if self.device == "cuda":
            import ctypes
            self._libcuda = ctypes.CDLL("libcuda.so.1")
            self._ev0 = torch.cuda.Event(enable_timing=True)
            self._ev1 = torch.cuda.Event(enable_timing=True)
            if recorder_path(job):
                from profiler_service.harness import kprof as kprof_mod
                self.kprof = kprof_mod.load()
                self.note = "recorder loaded" if self.kprof else "recorder not loaded"
                if self.kprof:
                    # One empty window now, so CUPTI's buffer thread exists before
                    # the thread baseline and the seccomp filter.
                    self.kprof.begin(kprof_mod.TAG_TIMED)
                    torch.ones(1, device="cuda").add_(1)
                    torch.cuda.synchronize()
                    self.kprof.end()
                    self.note = "recorder warm"

    def begin(self):
        if self.device == "cuda":
            self._libcuda.cuCtxResetPersistingL2Cache()
            torch.cuda.synchronize()
            if self.kprof:
                from profiler_service.harness import kprof as kprof_mod
                self.kprof.begin(kprof_mod.TAG_TIMED)
            t0 = time.perf_counter_ns()
            self._ev0.record()
            return t0
        return time.perf_counter_ns()

    def end(self, t0):
        if self.device != "cuda":
            return {"wall_us": (time.perf_counter_ns() - t0) / 1e3}
        self._ev1.record()
        torch.cuda.synchronize()  # every stream of the context
        sample = {"wall_us": (time.perf_counter_ns() - t0) / 1e3,
                  "event_us": self._ev0.elapsed_time(self._ev1) * 1e3}
        if self.kprof:
            r = self.kprof.end()
            sample.update(cupti_us=r.sum_us, gpu_busy_us=r.busy_us, num_activities=r.activities)
        return sample

    def report(self):
        """CUPTI activity over all windows, the stream and thread the calls ran on."""
        if self.device != "cuda":
            return {}
        rep = self.kprof.take_report() if self.kprof else {}
        if self.kprof:
            rep["harness_stream_ids"] = [self.kprof.stream_id(torch.cuda.current_stream().cuda_stream)]
            rep["harness_thread_id"] = self.kprof.gettid()
        return rep


# ----- reference process ------------------------------------------------------

def artifact_paths(artifact_dir, limit=64):
    found = sorted(glob.glob(os.path.join(artifact_dir, "**", "*.so"), recursive=True))
    return found[:limit]


class RemoteBackend:
    """The protocol's backend when the callable lives in another process."""

    def __init__(self, job, driver, nvml):
        self.name = job["device"]
        self.cupti_active = bool(job.get("kprof_lib")) and self.name == "cuda"
        self.driver = driver
        self.nvml = nvml
        self.last = None
        self.l2_bytes = 0
        self.report_cache = {}
        if self.name != "cuda":
            from profiler_service.harness import backends
            # The last-level cache is shared by every core: flushed from here.
            self._cpu = backends.CpuBackend(float(job["profiler"]["l2_flush_multiple"]))
        else:
            props = torch.cuda.get_device_properties(0)
            self.props = props
            self.l2_bytes = int(getattr(props, "L2_cache_size", 50 << 20))
            mult = float(job["profiler"]["l2_flush_multiple"])
            self._flush = torch.rand(int(mult * self.l2_bytes) // 4, device="cuda")
            self._flush_out = torch.empty((), device="cuda")
            self._anchor_src = torch.rand((256 << 20) // 4, device="cuda")
            self._anchor_dst = torch.empty_like(self._anchor_src)
            self._ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def device_info(self):
        if self.name != "cuda":
            return {"gpu_model": "cpu", "torch_version": torch.__version__, "backend": "cpu"}
        return {"gpu_model": self.props.name, "torch_version": torch.__version__, "l2_bytes": float(self.l2_bytes),
                "sm_count": self.props.multi_processor_count, "backend": "cuda"}

    def prepare(self):
        if self.name != "cuda":
            self._cpu.prepare()
        else:
            torch.sum(self._flush, dim=0, out=self._flush_out)  # reads 2x L2: evicts every line
            torch.cuda.synchronize()

    def begin(self, tag=0):
        return 0

    def end(self, _t0):
        return self.last

    def stream_ids(self):
        return []

    def report(self):
        msg = self.driver.stop() or {}
        self.report_cache = msg.get("report") if isinstance(msg.get("report"), dict) else {}
        return self.report_cache

    def anchor(self):
        """Trusted drift anchor: a 256 MB device copy timed in this process."""
        if self.name != "cuda":
            return self._cpu.anchor()  # the same copy the CPU baselines' anchor times
        from profiler_service.harness import backends
        self.prepare()
        return backends.event_anchor(self._anchor_src, self._anchor_dst, self._ev[0], self._ev[1])


def run_profile(job, task_module, model, driver, profile_seed, atol, rtol, result):
    """Times the candidate through the executor; writes the measurement into
    the trusted dir; returns the executor's final report (evidence)."""
    from profiler_service.harness import nvml as nvml_mod
    from profiler_service.harness import protocol as timing
    from profiler_service.harness import symbols, tasks

    device = job["device"]
    pc = job["profiler"]
    prof = {"started": True, "ok": False, "error": "", "rechecks": 0, "recheck_failures": 0,
            "wall_ms": 0.0, "detail": "", "mutated": False}
    result["profile"] = prof
    t0 = time.perf_counter()
    cfg = timing.ProtocolConfig.from_profiler_config(pc)
    wall_left = float(job["wall_seconds"]) * 0.85 - (time.monotonic() - float(job.get("t0_mono") or time.monotonic()))
    cfg.time_budget_s = max(0.05, min(cfg.time_budget_s, 0.5 * wall_left))
    nvml = nvml_mod.Nvml(0) if device == "cuda" else None
    backend = RemoteBackend(job, driver, nvml)
    open_calls = []
    handover_bytes = max(0, driver.poison_bytes - (1 << 20))  # the task's output bytes (set in verify)
    counter = iter(range(1 << 40))

    def close_open():
        while open_calls:
            call = open_calls.pop()
            if driver.mutated(call):
                prof["mutated"] = True
            driver.close(call)

    def make_inputs(_seed):
        close_open()
        k = next(counter)
        with torch.no_grad():
            xs = inputs_lib.make_inputs(task_module, timing_seed(profile_seed, k), "task", device)
        return [xs]

    def remote(xs):
        try:
            call = driver.start(xs, None)
            open_calls.append(call)
            reply = driver.finish(call)
        except Exception as e:
            raise RuntimeError(str(e)) from e
        sample = {k: float(v) for k, v in (reply.get("sample") or {}).items()
                  if k in SAMPLE_FIELDS and isinstance(v, (int, float))}
        sample["outside_us"] = call["outside_us"]
        if nvml is not None:
            reasons, throttled, clock_mhz, temp = nvml.sample()
            sample.update(throttle_reasons=reasons, throttled=throttled, sm_clock_mhz=clock_mhz,
                          temperature_c=temp)
        backend.last = sample
        return call

    def recheck(inputs, call):
        with torch.no_grad():
            refs = [o.detach() if isinstance(o, torch.Tensor) else o
                    for o in inputs_lib.flatten_outputs(model(*inputs[0]))]
        why = driver.compare(call, refs, atol, rtol)
        del refs
        if why and not prof["detail"]:
            prof["detail"] = f"timed call {call['id']} {why}"
        return not why

    report = {}
    try:
        runs, anchor = timing.run_protocol([("candidate", remote)], make_inputs, backend, cfg,
                                           secrets.randbits(62), recheck=recheck,
                                           error_prefix={"candidate": "candidate"})
        close_open()
        report = backend.report_cache
    except timing.HarnessError as e:
        runs, anchor = None, None
        prof["error"] = f"harness: {e}"
    run = (runs or {}).get("candidate")
    if run is not None:
        run["handover_bytes"] = float(handover_bytes)
        run["harness_stream_ids"] = [int(x) for x in report.get("harness_stream_ids", [])][:4]
        prof["ok"] = not run["error"]
        prof["error"] = run["error"]
        prof["rechecks"], prof["recheck_failures"] = run["rechecks"], run["recheck_failures"]
        measurement = {"candidate": run, "anchor": anchor, "device": backend.device_info(),
                       "candidate_symbols": symbols.kernel_symbols(artifact_paths(job["artifact_dir"])),
                       "input_policy_hash": tasks.input_policy_hash(device)}
        if job.get("baseline"):
            # What one call must move and compute, on our own Model and a set
            # of our own: the baseline's speed-of-light floor (trusted).
            from profiler_service.harness import work
            with torch.no_grad():
                xs = inputs_lib.make_inputs(task_module, timing_seed(profile_seed, 0), "task", device)
            measurement["work"] = work.estimate(model, xs)
            del xs
        path = os.path.join(job["trusted_dir"], MEASUREMENT_FILE)
        with open(path, "w") as f:
            json.dump(measurement, f)
        prof["measurement_file"] = path
    prof["wall_ms"] = (time.perf_counter() - t0) * 1e3
    return report
