"""The sandbox seam: the function the trusted harness calls after verify passes.

    profile_candidate(candidate, make_inputs, recheck, secret_seed=..., ...) -> str

candidate     the candidate's forward (callable taking the task's inputs);
make_inputs   make_inputs(seed) -> list of inputs on the task device, a fresh
              set per seed (the sandbox's secretly seeded input factory);
recheck       recheck(inputs, output) -> bool: compares one timed call's
              output with the reference on those inputs (the reference is
              computed where the sandbox keeps it, never shown to the candidate);
secret_seed   drives the input seeds and the unannounced recheck subset;
config        ProtocolConfig fields (dict, ProfilerConfig names accepted);
artifact_paths  the candidate's compiled .so files (kernel symbols);
device        "cuda" or "cpu".
Returns proto3 JSON of kernelrl.v1.ProfileMeasurement; the C++ core
(profiler_service/judge.h) turns it into the Verdict's timing fields.
The process must have been started with CUDA_INJECTION64_PATH=<libkprof.so>
for CUPTI timing; without it the run says cupti_active=false.
"""
import json

from profiler_service.harness import backends, protocol, symbols, tasks


def profile_candidate(candidate, make_inputs, recheck, *, secret_seed, config=None,
                      artifact_paths=(), device="cuda", work=None, input_policy_hash=None, backend=None):
    cfg = protocol.ProtocolConfig.from_dict(config)
    backend = backend or backends.make_backend(device, (config or {}).get("l2_flush_multiple") or 2.0)
    runs, anchor = protocol.run_protocol([("candidate", candidate)], make_inputs, backend, cfg, secret_seed,
                                         recheck=recheck, error_prefix={"candidate": "candidate"})
    measurement = {
        "candidate": runs["candidate"],
        "anchor": anchor,
        "device": backend.device_info(),
        "candidate_symbols": symbols.kernel_symbols(artifact_paths) if artifact_paths else [],
        "input_policy_hash": input_policy_hash or tasks.input_policy_hash(device),
    }
    if work:
        measurement["work"] = work
    return json.dumps(measurement)
