"""The sandbox's side of the profile seam (docs/HARNESS.md, "The profile stage").

After the reference process has seen every verify set pass, and only when the
job asks for it, it tells the candidate process "profile". The candidate
process then calls the profiler's entry point in the same process, under the
same isolation (seccomp, audit hook, thread guard, read-only view):

    profiler_service.harness.profile.profile_candidate(
        model, make_inputs, recheck, task, budget_s, config=..., artifact_paths=...)

- make_inputs(k): the k-th timing set, get_inputs() under the secret seed
  timing_seed(profile_seed, k) with the task's own distribution (what the
  baselines are timed on). The reference process can rebuild any set from k.
- recheck(outputs, inputs): writes the outputs to the exchange directory and
  asks the reference process, which rebuilds set k, runs Model and compares
  (same tolerance as verify). The reference process counts re-checks and
  failures itself: those counts are trusted, the measurement is not.
- The measurement (ProfileMeasurement JSON) goes to
  <exchange>/profile_measurement.json; the zygote copies it into the trusted
  dir once the candidate process is gone, and the C++ worker judges it
  (profiler_service JudgeProfile) against the cached baseline.

CUDA: the candidate process gets CUDA_INJECTION64_PATH=<libkprof.so> before it
initialises CUDA (the zygote never does), so CUPTI records from cuInit on; one
empty window right after CUDA init makes CUPTI start its threads before the
thread baseline and the seccomp filter are taken.
"""
import glob
import hashlib
import json
import os
import time

import torch

import inputs as inputs_lib

MEASUREMENT_FILE = "profile_measurement.json"
MAX_RECHECKS = 5000  # a candidate flooding the reference with requests gets no more answers
INT_FIELDS = ("min_samples", "max_samples", "warmup_calls", "block_calls")


def timing_seed(profile_seed, k):
    """Seed of the k-th timing input set (both processes derive it the same way)."""
    digest = hashlib.sha256(f"{int(profile_seed)}:{int(k)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def make_timing_inputs(task_module, job, k, device):
    return inputs_lib.make_inputs(task_module, timing_seed(job["profile_seed"], k), "task", device)


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


def warm_recorder(job):
    """After CUDA init, before the thread baseline and seccomp: one empty
    window, so CUPTI's buffer thread exists before the candidate is watched."""
    if not recorder_path(job):
        return "no recorder"
    from profiler_service.harness import kprof as kprof_mod
    kp = kprof_mod.load()
    if kp is None:
        return "recorder not loaded"
    kp.begin(kprof_mod.TAG_WARMUP)
    torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    kp.end()
    return "recorder warm"


def timing_modules(job):
    """The profiler's modules the candidate could patch to fake its timing:
    part of the monkey-patch snapshot of profiled jobs (already imported by the zygote)."""
    if not job.get("profile"):
        return []
    import sys
    names = ("profile", "protocol", "backends", "kprof", "nvml", "symbols")
    mods = [sys.modules.get(f"profiler_service.harness.{n}") for n in names]
    return [m for m in mods if m is not None]


def artifact_paths(artifact_dir, limit=64):
    found = sorted(glob.glob(os.path.join(artifact_dir, "**", "*.so"), recursive=True))
    return found[:limit]


def profile_config(job):
    cfg = {k: float(v) for k, v in (job.get("profile_config") or {}).items()}
    for k in INT_FIELDS:
        if k in cfg:
            cfg[k] = int(cfg[k])
    return cfg


def run_candidate(job, model, task_module, device, send, reader, export_outputs, deadline):
    """Times `model` with the profiler; returns the "profiled" message."""
    from profiler_service.harness import profile as profile_mod
    latest = [None, -1]  # the set the protocol just timed: it re-checks that call only

    def make_inputs(k):
        xs = make_timing_inputs(task_module, job, k, device)
        latest[0], latest[1] = xs, k
        return xs

    def recheck(outputs, xs):
        if latest[0] is not xs:
            return False
        k = latest[1]
        metas = export_outputs(inputs_lib.flatten_outputs(outputs), f"p{k}")
        send({"type": "recheck", "k": k, "outputs": metas})
        msg = reader.read(timeout=max(5.0, deadline - time.monotonic()))
        return bool(msg and msg.get("type") == "recheck_result" and msg.get("ok"))

    def forward(*xs):
        with torch.no_grad():
            return model(*xs)

    budget = deadline - time.monotonic()
    if budget < 0.5:
        return {"type": "profiled", "ok": False,
                "error": f"harness: {budget:.1f} s left in the verify wall, too little to profile"}
    task = {"task_id": job.get("task_id", ""), "device": device, "level": int(job.get("task_level") or 0)}
    try:
        res = profile_mod.profile_candidate(forward, make_inputs, recheck, task, budget,
                                            config=profile_config(job),
                                            artifact_paths=artifact_paths(job["artifact_dir"]))
    except Exception as e:  # noqa: BLE001 - profile_candidate catches the candidate's; this is ours
        res = {"ok": False, "error": f"harness: {type(e).__name__}: {e}", "measurement": {}}
    latest[0] = None
    with open(os.path.join(job["exchange_dir"], MEASUREMENT_FILE), "w") as f:
        json.dump(res.get("measurement") or {}, f)
    return {"type": "profiled", "ok": bool(res.get("ok")), "error": str(res.get("error") or "")[:2000]}


# ----- reference process ------------------------------------------------------

def serve_reference(job, task_module, model, device, send, reader, compare, result):
    """Answers the candidate's re-check requests until it reports "profiled".
    Fills result["profile"] with what the trusted side saw."""
    prof = {"started": True, "ok": False, "error": "", "rechecks": 0, "recheck_failures": 0,
            "wall_ms": 0.0, "detail": ""}
    result["profile"] = prof
    t0 = time.perf_counter()
    if not send({"type": "profile"}):
        prof["detail"] = "candidate gone before profiling"
        return
    while True:
        msg = reader.read(timeout=job["wall_seconds"] + 10)
        if msg is None:
            prof["detail"] = prof["detail"] or "candidate stopped answering while being profiled"
            break
        result["candidate_flags"] = sorted(set(result["candidate_flags"]) | set(msg.get("flags", [])))
        kind = msg.get("type")
        if kind == "recheck":
            ok, why = False, "too many re-check requests"
            if prof["rechecks"] < MAX_RECHECKS:
                ok, why = _recheck(job, task_module, model, device, msg, compare)
            prof["rechecks"] += 1
            if not ok:
                prof["recheck_failures"] += 1
                prof["detail"] = prof["detail"] or why
            send({"type": "recheck_result", "ok": ok})
        elif kind == "profiled":
            prof["ok"] = bool(msg.get("ok"))
            prof["error"] = str(msg.get("error") or "")[:2000]
            break
        elif kind == "error":
            result["candidate_error"] = {k: msg.get(k) for k in ("kind", "stage", "message", "audit", "torch_ops")}
            break
        elif kind == "log":
            result.setdefault("log", []).append((msg.get("text") or "")[-2000:])
    prof["wall_ms"] = (time.perf_counter() - t0) * 1e3


def _recheck(job, task_module, model, device, msg, compare):
    """(ok, why). The reference computation raising is our fault and propagates
    (INFRA_ERROR); a malformed request is the candidate's failure."""
    try:
        k = int(msg.get("k"))
    except (TypeError, ValueError):
        return False, "re-check request without a timing set index"
    if not 0 <= k < (1 << 40):
        return False, f"re-check of timing set {k}: out of range"
    if device == "cuda":
        torch.cuda.empty_cache()  # The previous re-check's blocks: room for 6 GB tensors.
    with torch.no_grad():
        xs = make_timing_inputs(task_module, job, k, device)
        refs = inputs_lib.flatten_outputs(model(*xs))
    del xs
    metas = msg.get("outputs")
    if not isinstance(metas, list) or len(metas) != len(refs):
        return False, f"timed call {k}: returned {len(metas) if isinstance(metas, list) else '?'} outputs, " \
                      f"expected {len(refs)}"
    for j, (ref, meta) in enumerate(zip(refs, metas)):
        if not isinstance(ref, torch.Tensor):
            continue
        try:
            why = compare(ref, meta if isinstance(meta, dict) else {}, j)
        except torch.cuda.OutOfMemoryError:
            raise  # Our memory, not the candidate's bytes: INFRA_ERROR, never a wrong answer.
        except Exception as e:  # noqa: BLE001 - bytes the candidate wrote do not load
            why = f"unreadable output ({type(e).__name__}: {e})"[:300]
        if why:
            return False, f"timed call {k} output {j}: {why}"
    return True, ""
