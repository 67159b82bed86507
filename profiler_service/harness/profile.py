"""The sandbox seam (docs/HARNESS.md): the function the trusted harness calls
in the candidate process after verify passes.

    profile_candidate(candidate, make_inputs, recheck, task, budget_s, ...) -> dict

candidate     the candidate's forward (ModelNew instance or any callable);
make_inputs   make_inputs(k) -> the k-th timing input set, on the task device,
              seeded by the sandbox with a secret per-evaluation seed;
recheck       recheck(outputs, inputs) -> bool: is this timed call's output
              still correct (the sandbox compares against the reference process);
task          {"task_id", "device", "level", "library_policy": {...}};
budget_s      wall budget left; the protocol keeps within 80% of it.
Keyword-only: config (ProtocolConfig / ProfilerConfig field names),
artifact_paths (the candidate's compiled .so files, for its kernel symbols),
backend (tests), secret_seed (else drawn from os.urandom).

Returns {"ok": bool, "error": str, "measurement": <kernelrl.v1.ProfileMeasurement
as proto3 JSON dict>}. Nothing is judged here: the sandbox's C++ passes the
measurement to kernelrl::JudgeProfile (profiler_service/judge.h) with the
cached Baseline, which fills the Verdict's times, speed-ups, coverage, flags
and reward. What the candidate process reports is evidence, computed where
the candidate could tamper with it; the judgement happens outside it.
The process must be started with CUDA_INJECTION64_PATH=<libkprof.so> for
CUPTI timing; without it the measurement says cupti_active=false.
"""
import itertools
import os

from profiler_service.harness import backends, protocol, symbols, tasks


def profile_candidate(candidate, make_inputs, recheck, task=None, budget_s=None, *, config=None,
                      artifact_paths=(), backend=None, secret_seed=None):
    task = task or {}
    device = task.get("device") or "cuda"
    cfg = protocol.ProtocolConfig.from_dict(config)
    if budget_s:
        # Warm-up, flushes and anchors take time beyond the timed calls.
        cfg.time_budget_s = max(0.05, min(cfg.time_budget_s, 0.5 * budget_s))
    if secret_seed is None:
        secret_seed = int.from_bytes(os.urandom(8), "little")
    counter = itertools.count()

    def next_inputs(_seed):
        return make_inputs(next(counter))

    def recheck_call(inputs, outputs):
        return bool(recheck(outputs, inputs))

    protocol._release_cached_memory()  # Verify-era cached blocks: room for the timed sets.
    try:
        backend = backend or backends.make_backend(device, (config or {}).get("l2_flush_multiple") or 2.0)
        runs, anchor = protocol.run_protocol([("candidate", candidate)], next_inputs, backend, cfg, secret_seed,
                                             recheck=recheck_call if recheck else None,
                                             error_prefix={"candidate": "candidate"})
    except Exception as e:  # noqa: BLE001 - the harness itself failed: infra, not the candidate
        return {"ok": False, "error": f"harness: {type(e).__name__}: {e}", "measurement": {}}
    measurement = {
        "candidate": runs["candidate"],
        "anchor": anchor,
        "device": backend.device_info(),
        "candidate_symbols": symbols.kernel_symbols(artifact_paths) if artifact_paths else [],
        "input_policy_hash": tasks.input_policy_hash(device),
    }
    err = runs["candidate"]["error"]
    return {"ok": not err, "error": err, "measurement": measurement}
