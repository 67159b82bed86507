"""The timing protocol: interleaved, adaptive, flushed, re-checked.

For callables f_0..f_k (a candidate, or eager + compiled):
  1. warm-up: `warmup_calls` calls each, in WARMUP windows (discarded);
  2. rounds until every callable has converged or the time budget is spent:
     for each callable still running, a block of `block_calls` calls, each
       - fresh inputs from the secret RNG, built while the previous call's
         inputs are still alive (so they sit at fresh addresses),
       - L2 flush (>= 2x L2 written) + persisting-L2 reset + full sync,
       - timing window (CUPTI) + CUDA events + host clock, full sync at the end,
       - NVML clocks / temperature / throttle reasons,
       - with probability `recheck_fraction` (secret RNG, not announced) the
         call's output is checked by `recheck(inputs, output)`;
     then one trusted anchor call (driver-API device copy) for drift;
  3. a callable converges when it has >= min_samples and the relative
     standard error of its per-call times is <= target_rse; it stops at
     max_samples or when the shared budget (time_budget_s per callable) ends.
The medians, flags and the reward are computed by the C++ core from the
RawTimingRun dicts this returns (proto3 JSON field names).
"""
import dataclasses
import math
import random
import time

from profiler_service.harness import kprof as kprof_mod


@dataclasses.dataclass
class ProtocolConfig:
    """The timing protocol's knobs. No defaults here: they live in one place,
    profiler_service/profiler_defaults.cc, and arrive as a ProfilerConfig."""
    target_rse: float
    time_budget_s: float
    min_samples: int
    max_samples: int
    warmup_calls: int
    recheck_fraction: float
    min_rechecks: int
    block_calls: int = 5
    anchor: bool = True

    FIELDS = {"target_rel_std_error": "target_rse", "time_budget_s": "time_budget_s",
              "min_samples": "min_samples", "max_samples": "max_samples", "warmup_calls": "warmup_calls",
              "recheck_fraction": "recheck_fraction", "min_rechecks": "min_rechecks"}

    @classmethod
    def from_profiler_config(cls, pc):
        """From a ProfilerConfig as proto3 JSON (original field names), defaults applied."""
        missing = [k for k in cls.FIELDS if k not in pc]
        if missing:
            raise ValueError(f"ProfilerConfig without {', '.join(missing)} (defaults are applied in C++)")
        kw = {v: pc[k] for k, v in cls.FIELDS.items()}
        for k in ("min_samples", "max_samples", "warmup_calls", "min_rechecks"):
            kw[k] = int(kw[k])
        return cls(**kw)


class HarnessError(Exception):
    """The harness could not make inputs: infra, never the candidate's fault."""


def rel_std_error(xs):
    """stderr / mean, as profiler_service/stats.cc computes it."""
    n = len(xs)
    if n < 2:
        return math.inf
    m = sum(xs) / n
    if m == 0:
        return math.inf
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return math.sqrt(var) / math.sqrt(n) / abs(m)


def _primary(sample, backend):
    if backend.name == "cpu":
        return sample["wall_us"]
    if backend.cupti_active:
        return sample["cupti_us"]
    return sample["event_us"]


class _Run:
    def __init__(self, index, label, fn):
        self.tag = kprof_mod.TAG_TIMED + index
        self.label, self.fn = label, fn
        self.samples, self.rechecks, self.failures = [], 0, 0
        self.stop_reason, self.error = "", ""

    def converged(self, cfg, backend):
        n = len(self.samples)
        if n >= cfg.max_samples:
            self.stop_reason = "max_samples"
            return True
        if n >= cfg.min_samples and rel_std_error([_primary(s, backend) for s in self.samples]) <= cfg.target_rse:
            self.stop_reason = "rse_target"
            return True
        return False


def _release_cached_memory():
    import gc
    gc.collect()
    try:
        import torch
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def run_protocol(targets, make_inputs, backend, cfg, secret_seed, recheck=None, error_prefix=None):
    """targets: [(label, fn)]; make_inputs(seed) -> list of call arguments;
    recheck(inputs, output) -> bool. Returns ({label: RawTimingRun dict}, anchor dict).
    A callable that raises stops; its run carries error "<prefix or label>: <exception>"."""
    rng = random.Random(secret_seed)
    runs = [_Run(i, label, fn) for i, (label, fn) in enumerate(targets)]
    anchor = {"label": "anchor", "backend": backend.name, "samples": [], "cupti_active": backend.cupti_active}
    prefix = error_prefix or {}

    def call(run, tag, inputs):
        backend.prepare()
        t0 = backend.begin(tag)
        try:
            out = run.fn(*inputs)
        except BaseException:
            backend.end(t0)  # Close the window so the next one can open.
            raise
        return out, backend.end(t0)

    held = {"inputs": None}  # The previous set, kept alive so the next one gets new addresses.

    def fresh_inputs():
        seed = rng.getrandbits(62)
        try:
            return make_inputs(seed)
        except Exception as e:  # noqa: BLE001
            if "out of memory" not in str(e).lower() and not isinstance(e, MemoryError):
                raise HarnessError(f"make_inputs: {type(e).__name__}: {e}") from e
        # Two sets do not fit (6 GB KernelBench tensors): give up fresh addresses
        # for this task (the unannounced re-checks still catch pointer caches).
        held["inputs"] = None
        _release_cached_memory()
        try:
            return make_inputs(seed)
        except Exception as e:  # noqa: BLE001
            raise HarnessError(f"make_inputs: {type(e).__name__}: {e}") from e

    for run in runs:
        try:
            for _ in range(cfg.warmup_calls):
                held["inputs"] = fresh_inputs()
                call(run, kprof_mod.TAG_WARMUP, held["inputs"])
        except HarnessError:
            raise
        except Exception as e:  # noqa: BLE001 - any other failure is the callable's
            run.error = f"{prefix.get(run.label, run.label)}: {type(e).__name__}: {e}"
    stream_ids = backend.stream_ids()

    active = [r for r in runs if not r.error]
    deadline = time.monotonic() + cfg.time_budget_s * max(1, len(active))
    if cfg.anchor:
        anchor["samples"].append(backend.anchor())
    while active:
        for run in list(active):
            try:
                for _ in range(cfg.block_calls):
                    inputs = fresh_inputs()  # Previous set still alive (if it fits): new addresses.
                    out, sample = call(run, run.tag, inputs)
                    # Decided after the call returned, by this process's RNG; at
                    # least min_rechecks by the time min_samples are taken.
                    need = cfg.min_rechecks - run.rechecks
                    left = max(1, cfg.min_samples - len(run.samples))
                    if recheck is not None and rng.random() < max(cfg.recheck_fraction, need / left):
                        sample["rechecked"] = True
                        run.rechecks += 1
                        if not recheck(inputs, out):
                            run.failures += 1
                    run.samples.append(sample)
                    held["inputs"], inputs, out = inputs, None, None
            except HarnessError:
                raise
            except Exception as e:  # noqa: BLE001
                run.error = f"{prefix.get(run.label, run.label)}: {type(e).__name__}: {e}"
                active.remove(run)
                continue
            if run.converged(cfg, backend):
                active.remove(run)
        if cfg.anchor:
            anchor["samples"].append(backend.anchor())
        if active and time.monotonic() > deadline:
            for run in active:
                run.stop_reason = "time_budget"
            break
    held["inputs"] = None

    report = backend.report()
    harness_tids = report.get("harness_thread_ids", [])
    result = {}
    for run in runs:
        acts = [dict((k, v) for k, v in a.items() if k != "tag")
                for a in report.get("activities", []) if a.get("tag") == run.tag]
        result[run.label] = {
            "label": run.label, "backend": backend.name, "samples": run.samples,
            "activities": acts, "stop_reason": run.stop_reason, "warmup_calls": cfg.warmup_calls,
            "rechecks": run.rechecks, "recheck_failures": run.failures,
            "harness_thread_id": getattr(backend, "harness_tid", 0) or (harness_tids[0] if harness_tids else 0),
            "harness_stream_ids": stream_ids,
            "outside_window_gpu_us": float(report.get("escaped_us", 0.0)),
            "cupti_active": backend.cupti_active, "error": run.error,
            "budget_s": cfg.time_budget_s, "target_rse": cfg.target_rse,
            "dropped_records": int(report.get("dropped_records", 0)),
        }
    anchor["stop_reason"] = "rounds"
    return result, anchor
