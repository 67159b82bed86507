"""The profile stage (docs/HARNESS.md): the protocol runs in the reference
process (trusted); the candidate process only executes blocks.

Reference process (run_profile), after every verify set passed:
  forwards     per block: enough that the block's fixed overhead (two pipe
               wake-ups, one sync, one input copy, one seal) amortises
               over `block_target_us`, within `max_forwards_per_block` and
               `block_memory_bytes` (and half the device's free memory);
               first estimated from the verify blocks' forwards (go-to-done
               on our clock), then from the first warm-up block;
  blocks       warm-up blocks, then timed blocks until the trusted figure's
               relative standard error reaches the target (at least
               min_samples), max_samples, or the time budget. Every forward
               of every block runs on a fresh input set from the verify
               distributions and is compared with the Model's outputs, and
               a secret sample of each block's forwards with the fp64 ones
               too (reference.Driver.check);
  sample       per block: the trusted figure (reference.Driver.block) beside
               the executor's in-process figures per forward (CUPTI sum,
               events, wall: attribution and evidence, never paid) and NVML;
  graph        forwards estimated below `graph_below_us` (GPU exchange):
               after the warm-up, every timed eager block is followed by a
               graph block, which the executor captures once and replays
               (sandbox/harness/graphs.py), up to
               `max_forwards_per_graph_block` forwards; its samples are tagged
               `graph` and pay only against the baseline's graph samples. A
               capture failure or a wrong replay ends graph blocks (the wrong
               replay's samples are dropped; `graph_note` says why);
  anchor       a device copy timed by events in this process, every 5 blocks;
  sharing      the driver's per-process utilisation samples, read by this
               process (gpu_share.py): another process's GPU work during the
               blocks declines the verdict (device_shared).
The ProfileMeasurement is assembled here and written to the trusted dir; the
C++ worker judges it (JudgeProfile) on the trusted figure.

Candidate process (CallTimer): the same window around every block: before
the clock persisting-L2 reset, sync and the recorder's window open; inside it
events around the forwards and a device-wide sync; after it the recorder's
window closes and its sums are divided by the block's forwards.
"""
import glob
import hashlib
import json
import math
import os
import time

import torch

import protocol

MEASUREMENT_FILE = "profile_measurement.json"
# Timed eager blocks before the time budget may end the run: one block's
# figure has no spread, and the judge pays no speed-up it cannot resolve from
# the noise (profiler_service/judge.cc), so a big kernel timed once could
# never earn more than 1.
MIN_TIMED_BLOCKS = 3
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
                    # One window now, so CUPTI's buffer thread exists before the
                    # thread baseline and the seccomp filter. Untimed: its two torch
                    # kernels are the harness's, and in a timed window they would
                    # count as torch ops beside a candidate's library call.
                    self.kprof.begin(kprof_mod.TAG_WARMUP)
                    torch.ones(1, device="cuda").add_(1)
                    torch.cuda.synchronize()
                    self.kprof.end()
                    self.note = "recorder warm"

    def open(self):
        """Before the reference's clock: persisting-L2 reset, the recorder's
        window opens. (The clock starts with the reference's own copy, so the
        GPU is on the reference's context then: it flushes the L2 last.)"""
        if self.device == "cuda":
            self._libcuda.cuCtxResetPersistingL2Cache()
            torch.cuda.synchronize()
            if self.kprof:
                from profiler_service.harness import kprof as kprof_mod
                self.kprof.begin(kprof_mod.TAG_TIMED)

    def start(self):
        t0 = time.perf_counter_ns()
        if self.device == "cuda":
            self._ev0.record()
        return t0

    def stop(self, t0):
        """The block's end: a device-wide sync (every stream of the context)."""
        if self.device == "cuda":
            self._ev1.record()
            torch.cuda.synchronize()
        self._wall_us = (time.perf_counter_ns() - t0) / 1e3

    def close(self, forwards):
        """After the reference's clock: the in-process figures per forward
        (evidence and attribution; they never pay)."""
        n = max(1, int(forwards))
        sample = {"wall_us": self._wall_us / n}
        if self.device == "cuda":
            sample["event_us"] = self._ev0.elapsed_time(self._ev1) * 1e3 / n
            if self.kprof:
                r = self.kprof.end()
                sample.update(cupti_us=r.sum_us / n, gpu_busy_us=r.busy_us / n, num_activities=r.activities)
        return sample

    def report(self):
        """CUPTI activity over all windows, the stream and thread the calls ran on."""
        if self.device != "cuda":
            return {}
        rep = self.kprof.take_report() if self.kprof else {}
        if self.kprof:
            rep["harness_stream_ids"] = self.kprof.default_stream_ids()
            rep["harness_thread_id"] = self.kprof.gettid()
        return rep


# ----- reference process ------------------------------------------------------

def artifact_paths(artifact_dir, limit=64):
    found = sorted(glob.glob(os.path.join(artifact_dir, "**", "*.so"), recursive=True))
    return found[:limit]


class RemoteBackend:
    """What the reference process does on the device around blocks: the L2
    flush before each clock, the drift anchor, the device's identity."""

    def __init__(self, job):
        self.name = job["device"]
        self.cupti_active = bool(job.get("kprof_lib")) and self.name == "cuda"
        self.l2_bytes = 0
        mult = float(job["profiler"]["l2_flush_multiple"])
        if self.name != "cuda":
            from profiler_service.harness import backends
            # The last-level cache is shared by every core: flushed from here.
            self._cpu = backends.CpuBackend(mult)
        else:
            props = torch.cuda.get_device_properties(0)
            self.props = props
            self.l2_bytes = int(getattr(props, "L2_cache_size", 50 << 20))
            self._flush = torch.rand(int(mult * self.l2_bytes) // 4, device="cuda")
            self._flush_out = torch.empty((), device="cuda")
            self._anchor_src = torch.rand((256 << 20) // 4, device="cuda")
            self._anchor_dst = torch.empty_like(self._anchor_src)
            self._ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def device_info(self):
        if self.name != "cuda":
            return {"gpu_model": "cpu", "torch_version": torch.__version__, "backend": "cpu"}
        return {"gpu_model": self.props.name, "torch_version": torch.__version__, "l2_bytes": float(self.l2_bytes),
                "sm_count": self.props.multi_processor_count, "backend": "cuda",
                "peak_dram_bytes_per_s": peak_copy_bytes_per_us("cuda") * 1e6}

    def prepare(self):
        if self.name != "cuda":
            self._cpu.prepare()
        else:
            torch.sum(self._flush, dim=0, out=self._flush_out)  # reads 2x L2: evicts every line
            torch.cuda.synchronize()

    def anchor(self):
        """Trusted drift anchor: a 256 MB device copy timed in this process."""
        if self.name != "cuda":
            return self._cpu.anchor()  # the same copy the CPU baselines' anchor times
        from profiler_service.harness import backends
        self.prepare()
        return backends.event_anchor(self._anchor_src, self._anchor_dst, self._ev[0], self._ev[1])


def peak_copy_bytes_per_us(device):
    """The device's peak DRAM bandwidth (bytes/us) from its own properties, 0 if unknown."""
    if device != "cuda":
        return 0.0
    props = torch.cuda.get_device_properties(0)
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e6  # double data rate


class BlockConfig:
    """The profile protocol's knobs, from the ProfilerConfig the worker wrote
    into the trusted dir (defaults applied in C++, profiler_defaults.cc)."""

    def __init__(self, pc, wall_left_s):
        need = ("target_rel_std_error", "time_budget_s", "min_samples", "max_samples", "warmup_calls",
                "block_target_us", "max_forwards_per_block", "block_memory_bytes", "graph_below_us",
                "max_forwards_per_graph_block")
        missing = [k for k in need if k not in pc]
        if missing:
            raise ValueError(f"ProfilerConfig without {', '.join(missing)} (defaults are applied in C++)")
        self.target_rse = float(pc["target_rel_std_error"])
        self.time_budget_s = max(0.05, min(float(pc["time_budget_s"]), 0.5 * wall_left_s))
        # The budget does not stop the blocks before MIN_TIMED_BLOCKS, this wall allowing.
        self.wall_cap_s = max(self.time_budget_s, 0.5 * wall_left_s)
        self.min_samples, self.max_samples = int(pc["min_samples"]), int(pc["max_samples"])
        self.warmup_blocks = int(pc["warmup_calls"])
        self.block_target_us = float(pc["block_target_us"])
        self.max_forwards = int(pc["max_forwards_per_block"])
        self.block_memory = int(pc["block_memory_bytes"])
        self.graph_below_us = float(pc["graph_below_us"])
        self.max_graph_forwards = int(pc["max_forwards_per_graph_block"])


def lease_settled(job, clock=time.time, sleep=time.sleep):
    """With the GPU lease (the worker waited for it): the time (Unix s) from
    which the driver's per-process samples no longer report the holders that
    paused for it (their last step's end plus the sample lag), slept until if
    it is still ahead; 0 without a lease or shared holder."""
    quiet = float(job.get("gpu_lease_quiet_since_unix_s") or 0.0)
    if quiet <= 0:
        return 0.0
    settled = quiet + float(job["profiler"].get("gpu_lease_sample_lag_s") or 0.0)
    wait = settled - clock()
    if wait > 0:
        sleep(wait)
    return settled


def _forwards(cfg, est_us, capacity):
    """Forwards per block: enough that the block's own overhead amortises."""
    want = int(math.ceil(cfg.block_target_us / max(est_us, 1e-3)))
    return max(1, min(want, capacity))


def verify_estimate_us(result):
    """A forward's time from the verify blocks, for the first block size and
    the graph decision (never paid): their forwards' go-to-done on our clock.
    The whole verify block also holds its input copy, the locate and the
    snapshot (~4 ms for a ~1 ms kernel, which then never got graph blocks)."""
    per = result.get("forward_us") or [ms * 1e3 for ms in result.get("forward_ms") or []]
    return min(per) if per else 1e3


def _capacity(cfg, layout, exchange_bytes, max_forwards):
    """Forwards a block may hold within block_memory_bytes (and, for the file
    exchange, half the exchange directory): per forward its inputs twice (the
    area's row, our staging) and its outputs four times (the area's row, the
    executor's own, our snapshot, our fp32 expected ones; the fp64 ones are
    computed one forward at a time when compared)."""
    per = 2 * layout.in_row + 4 * layout.out_row + 1
    cap = cfg.block_memory // per
    if exchange_bytes > 0:
        cap = min(cap, (exchange_bytes // 2) // max(1, layout.in_row + layout.out_row))
    return max(1, min(max_forwards, cap))


def warm_up(cfg, sizes, graph, one_block, capacity):
    """The untimed blocks before the first timed one; False when one failed.
    sizes["eager"] and graph["forwards"] (forwards per block) end at the sizes
    the timed blocks take, and each has run untimed at that size: the
    executor's allocator has grown to it and the segments its outputs land in
    are mapped by us here, not inside a timed block's clock; and the graph the
    timed graph blocks replay (one per size, graphs.py) has been replayed once
    here, since a graph's first replay also uploads it to the device (on the
    H200, 1,770 first timed replays read a median 5.9% above the later ones,
    and their spread made honest small kernels' speed-ups unresolved).
    one_block(timed, as_graph) -> (ok, the executor's figure per forward)."""
    warmed_at = None
    for w in range(max(1, cfg.warmup_blocks)):
        warmed_at = sizes["eager"]
        ok, per = one_block(False)
        if not ok:
            return False
        if w == 0:
            sizes["eager"] = _forwards(cfg, per, capacity)  # re-estimated without the one-forward overhead
    if warmed_at != sizes["eager"]:
        ok, _ = one_block(False)
        if not ok:
            return False
    if not graph["on"]:
        return True
    # Captured at the eager size first: its replay sizes the graph blocks.
    ok, per = one_block(False, as_graph=True)
    if ok and graph["on"] and per is not None:
        sized = _forwards(cfg, per, graph["capacity"])
        if sized != graph["forwards"]:
            graph["forwards"] = sized
            ok, _ = one_block(False, as_graph=True)
    return ok


def run_profile(job, task_module, model, driver, sets, backend, result, clock=None):
    """Times the executor in blocks of fresh, fully compared forwards; writes
    the measurement into the trusted dir; returns the executor's final report.
    clock (protocol.Timeline): where this process's wall goes, per step."""
    from profiler_service.harness import gpu_share
    from profiler_service.harness import nvml as nvml_mod
    from profiler_service.harness import symbols, tasks
    from profiler_service.harness.protocol import rel_std_error

    device = job["device"]
    prof = {"started": True, "ok": False, "error": "", "rechecks": 0, "recheck_failures": 0,
            "wall_ms": 0.0, "lease_settle_ms": 0.0, "detail": "", "mutated": False}
    result["profile"] = prof
    t0 = time.perf_counter()
    # The job's own time so far: its waits for its turns (reference.Turns) are not its.
    spent = time.monotonic() - float(job.get("t0_mono") or time.monotonic()) - float(job.get("turn_wait_s") or 0.0)
    wall_left = float(job["wall_seconds"]) * 0.85 - spent
    cfg = BlockConfig(job["profiler"], wall_left)
    bus = nvml_mod.cuda_pci_bus_id(torch.cuda.get_device_properties(0)) if device == "cuda" else ""
    nvml = nvml_mod.Nvml(bus) if device == "cuda" else None
    # Another process's GPU work while our blocks run (this process's own NVML
    # reads): the verdict is declined, never paid or blamed (device_shared).
    share = gpu_share.Monitor(nvml_mod.Processes(bus)) if device == "cuda" else None
    scaled = set(job.get("atol_scaled_dists") or [])
    run = {"label": "candidate", "backend": backend.name, "samples": [], "activities": [], "stop_reason": "",
           "warmup_calls": cfg.warmup_blocks, "rechecks": 0, "recheck_failures": 0, "error": "",
           "cupti_active": backend.cupti_active, "budget_s": cfg.time_budget_s, "target_rse": cfg.target_rse}
    anchor = {"label": "anchor", "backend": backend.name, "samples": [], "cupti_active": backend.cupti_active,
              "stop_reason": "rounds"}
    file_bytes = int(job.get("exchange_bytes") or 0) if driver.ex.kind == "file" else 0
    if device == "cuda":
        # Half the device's free memory at most (after verify, with whatever
        # else runs on it): the executor's own work needs the rest.
        cfg.block_memory = min(cfg.block_memory, torch.cuda.mem_get_info()[0] // 2)
    driver.capacity = _capacity(cfg, driver.ex.layout, file_bytes, cfg.max_forwards)
    driver.clock = clock  # a block's parts: block_ready, _stage, _arm, _prepare, _clock, _result
    est = verify_estimate_us(result)
    sizes = {"eager": _forwards(cfg, est, driver.capacity)}
    # Graph blocks (sandbox/harness/graphs.py) for small forwards, alternating
    # with the eager ones; on a GPU exchange only (the capture needs the rows
    # on the device) and not where each block releases memory.
    graph = {"on": device == "cuda" and driver.ex.kind == "gpu" and 0 < est < cfg.graph_below_us
             and not job.get("release_each_call"),
             "capacity": _capacity(cfg, driver.ex.layout, file_bytes, cfg.max_graph_forwards),
             "forwards": sizes["eager"]}
    run["graph_note"] = ""

    def mark(step):
        if clock is not None:
            clock.mark(step)

    def one_block(timed, as_graph=False):
        rows, expected, scale = [], [], set()
        for k, (dist, xs, exp) in enumerate(sets.make_block(graph["forwards"] if as_graph else sizes["eager"])):
            rows.append(xs)
            expected.append(exp)
            if dist in scaled:
                scale.add(k)
        mark("profile_inputs")
        call = driver.block(rows, expected, graph=as_graph)
        mark("profile_blocks")
        why = driver.check(call, scale)
        mark("profile_check")
        mutated, late = driver.close(call)
        mark("profile_close")
        run["rechecks"] += call["forwards"]
        if mutated:
            prof["mutated"] = True
        if late:
            result["written_after_done"] = True
        if as_graph and not call["graph"]:  # the executor could not capture: eager from here on
            graph["on"] = False
            run["graph_note"] = "capture failed: " + str(call["reply"].get("graph") or "no reason given")[:240]
        if why and call["graph"] and not mutated and not late:
            # A replay that computed something else never pays: its figures
            # go, the eager blocks carry on (they are compared as before).
            graph["on"] = False
            run["graph_note"] = f"graph block {call['id']} {why}"
            run["samples"] = [s for s in run["samples"] if not s.get("graph")]
            return True, None
        if why and not mutated and not late:
            run["recheck_failures"] += 1
            prof["detail"] = prof["detail"] or f"timed block {call['id']} {why}"
        sample = {k: float(v) for k, v in (call["reply"].get("sample") or {}).items()
                  if k in SAMPLE_FIELDS and isinstance(v, (int, float))}
        sample.update(trusted_us=call["trusted_us"], forwards=call["forwards"], block_us=call["block_us"],
                      copies_us=call["copies_us"], rechecked=True, graph=call["graph"], **call["phases"])
        if nvml is not None:
            reasons, throttled, clock_mhz, temp = nvml.sample()
            sample.update(throttle_reasons=reasons, throttled=throttled, sm_clock_mhz=clock_mhz,
                          temperature_c=temp)
        ok = not (why or mutated or late)
        if timed and ok:
            run["samples"].append(sample)
        # For sizing the next blocks only (it never pays): the executor's own
        # per-forward wall, where the trusted figure still carries the
        # block's fixed overhead. A lie can only shrink or grow the block.
        est = min(call["trusted_us"], sample.get("wall_us") or call["trusted_us"])
        return ok, est

    report = {}
    try:
        deadline = time.monotonic() + cfg.time_budget_s
        cap = time.monotonic() + cfg.wall_cap_s
        if share:
            # Before the warm-up, not after it: the timed blocks must follow
            # the warm-up's with no idle gap, in which the clocks ramp down.
            settle_from = time.monotonic()
            share.begin(not_before=lease_settled(job))
            prof["lease_settle_ms"] = (time.monotonic() - settle_from) * 1e3
        mark("lease_settle")
        ok = warm_up(cfg, sizes, graph, one_block, driver.capacity)
        anchor["samples"].append(backend.anchor())
        while ok:
            ok, _ = one_block(True)
            if ok and graph["on"]:
                ok, _ = one_block(True, as_graph=True)
            n = sum(1 for s in run["samples"] if not s.get("graph"))
            if n and n % 5 == 0:
                anchor["samples"].append(backend.anchor())
                if share:
                    share.poll()
            if n >= cfg.max_samples:
                run["stop_reason"] = "max_samples"
                break
            if n >= cfg.min_samples and rel_std_error([s["trusted_us"] for s in run["samples"]
                                                       if not s.get("graph")]) <= cfg.target_rse:
                run["stop_reason"] = "rse_target"
                break
            now = time.monotonic()
            if now > deadline and (n >= MIN_TIMED_BLOCKS or now > cap):
                run["stop_reason"] = "time_budget"
                break
        anchor["samples"].append(backend.anchor())
    except protocol.CandidateGone as e:
        run["error"] = f"candidate: {e}"
    except Exception as e:  # noqa: BLE001 - input generation or our own memory: never the candidate's
        run["error"] = f"harness: {type(e).__name__}: {e}"
    if share:
        run.update(share.result())
    if driver.input_rate > 0 and driver.ex.layout is not None:
        # The probe's rates and the bytes a forward copies: the judge compares
        # with a baseline timed by another worker at a common input rate.
        lay = driver.ex.layout
        run["copies"] = {"input_bytes_per_us": driver.input_rate, "seal_bytes_per_us": driver.seal_rate,
                         "input_bytes": float(sum(lay.in_sizes)), "output_bytes": float(sum(lay.out_sizes))}
    msg = driver.stop() or {}
    report = msg.get("report") if isinstance(msg.get("report"), dict) else {}
    run["activities"] = [dict((k, v) for k, v in a.items() if k != "tag")
                         for a in report.get("activities", []) if a.get("tag") == kprof_tag_timed()]
    run["harness_stream_ids"] = [int(x) for x in report.get("harness_stream_ids", [])][:4]
    tids = report.get("harness_thread_ids", [])
    run["harness_thread_id"] = int(report.get("harness_thread_id") or (tids[0] if tids else 0))
    run["outside_window_gpu_us"] = float(report.get("escaped_us", 0.0))
    run["dropped_records"] = int(report.get("dropped_records", 0))
    prof["rechecks"], prof["recheck_failures"] = run["rechecks"], run["recheck_failures"]
    prof["ok"] = not run["error"]
    prof["error"] = run["error"]
    if not run["error"] or run["samples"]:
        measurement = {"candidate": run, "anchor": anchor, "device": backend.device_info(),
                       "candidate_symbols": symbols.kernel_symbols(artifact_paths(job["artifact_dir"])),
                       "input_policy_hash": tasks.input_policy_hash(device, tf32=job.get("precision") == "tf32")}
        if job.get("baseline"):
            # What one call must move and compute, on our own Model and a set
            # of our own: the baseline's speed-of-light floor (trusted).
            from profiler_service.harness import work
            _, xs, _ = sets.make("task")
            measurement["work"] = work.estimate(model, xs)
            del xs
        path = os.path.join(job["trusted_dir"], MEASUREMENT_FILE)
        with open(path, "w") as f:
            json.dump(measurement, f)
        prof["measurement_file"] = path
    prof["wall_ms"] = (time.perf_counter() - t0) * 1e3
    return report


def kprof_tag_timed():
    from profiler_service.harness import kprof as kprof_mod
    return kprof_mod.TAG_TIMED
