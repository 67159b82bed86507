"""Device checks of the profiler (run by tools/device_profiler.sh on the GPU host).

  python3 -m profiler_service.harness.device.checks cupti  OUT_DIR  # CUPTI medians, CV, exploits
  python3 -m profiler_service.harness.device.checks ncu_target       # launches for ncu to time

Needs CUDA_INJECTION64_PATH=<libkprof.so> (cupti mode) and KERNELRL_TEST_KERNELS=<kernels .so>.
Writes OUT_DIR/cupti_kernels.json, OUT_DIR/cv.json, OUT_DIR/exploits.jsonl (ProfileMeasurement per
case; the C++ judge classifies them: profiler_service:judge_measurements).
"""
import ctypes
import json
import os
import statistics
import sys

import torch

from profiler_service.harness import backends, profile, protocol

LIB = None


def lib():
    global LIB
    if LIB is None:
        LIB = ctypes.CDLL(os.environ["KERNELRL_TEST_KERNELS"])
    return LIB


def P(t):
    return ctypes.c_void_p(t.data_ptr())


def S():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def ok(rc):
    if rc != 0:
        raise RuntimeError(f"kernel launch returned {rc}")


# name -> (make_inputs(seed), fn(*inputs), reference(*inputs))
def kernel_cases():
    def rand(*shape):
        return lambda seed: [torch.rand(*shape, device="cuda", generator=torch.Generator("cuda").manual_seed(seed + i))
                             for i in range(2)]
    cases = {}
    n = 32 << 20
    cases["vec_add"] = (rand(n), lambda a, b: _run(lambda c: lib().kt_vec_add(P(a), P(b), P(c), ctypes.c_long(n), S()), a),
                        lambda a, b: a + b)
    m = 16 << 20
    cases["scale_shift"] = (rand(m), lambda a, b: _run(lambda c: lib().kt_scale_shift(P(a), P(c), ctypes.c_long(m), S()), a),
                            lambda a, b: a * 1.5 + 0.25)
    t = 8192
    cases["transpose_naive"] = (rand(t, t), lambda a, b: _run(lambda c: lib().kt_transpose(P(a), P(c), t, S()), a),
                                lambda a, b: a.t().contiguous())
    rows, cols = 16384, 4096
    cases["row_sum"] = (rand(rows, cols), lambda a, b: _run(lambda c: lib().kt_row_sum(P(a), P(c), rows, cols, S()),
                                                             a[:, 0].contiguous()),
                        lambda a, b: a.sum(1))
    f = 4 << 20
    cases["fma_loop"] = (rand(f), lambda a, b: _run(lambda c: lib().kt_fma_loop(P(a), P(c), ctypes.c_long(f), 2000, S()), a),
                         None)
    k = 1024
    cases["matmul_tiled"] = (rand(k, k), lambda a, b: _run(lambda c: lib().kt_matmul(P(a), P(b), P(c), k, S()), a),
                             lambda a, b: a @ b)
    return cases


def _run(launch, like):
    c = torch.empty_like(like)
    ok(launch(c))
    return c


def _close(ref_fn):
    if ref_fn is None:
        return None

    def recheck(inputs, out):
        with torch.backends.cudnn.flags(allow_tf32=False):
            torch.backends.cuda.matmul.allow_tf32 = False
            return bool(torch.allclose(out, ref_fn(*inputs), atol=1e-2, rtol=1e-2))
    return recheck


def cupti_checks(out_dir):
    backend = backends.make_backend("cuda")
    assert backend.cupti_active, "CUPTI recorder not injected"
    cfg = protocol.ProtocolConfig(time_budget_s=1.0, min_samples=20, max_samples=400)
    by_mode = {}
    modes = os.environ.get("KPROF_FLUSH_MODES", "write,read").split(",")
    for mode in modes:  # Each flush, compared with ncu by the script.
        backend.flush_mode = mode
        by_mode[mode] = kernels = {}
        _time_kernels(backend, cfg, kernels, mode)
    json.dump(by_mode, open(os.path.join(out_dir, "cupti_kernels.json"), "w"), indent=1)
    backend.flush_mode = "read"
    _cv_and_exploits(out_dir, backend)


def _time_kernels(backend, cfg, kernels, mode):
    for name, (mk, fn, ref) in kernel_cases().items():
        runs, _ = protocol.run_protocol([(name, fn)], mk, backend, cfg, secret_seed=11, recheck=_close(ref))
        r = runs[name]
        med = statistics.median(s["cupti_us"] for s in r["samples"])
        ev = statistics.median(s["event_us"] for s in r["samples"])
        kernels[name] = {"cupti_median_us": med, "event_median_us": ev, "samples": len(r["samples"]),
                         "rse": protocol.rel_std_error([s["cupti_us"] for s in r["samples"]]),
                         "rechecks": r["rechecks"], "recheck_failures": r["recheck_failures"],
                         "activities": [(a["name"], a["count"]) for a in r["activities"]],
                         "throttled": sum(s["throttled"] for s in r["samples"]),
                         "sm_clock_mhz": statistics.median(s["sm_clock_mhz"] for s in r["samples"])}
        print(f"cupti[{mode}] {name:16s} median {med:9.2f} us  events {ev:9.2f} us  n={len(r['samples'])}", flush=True)


def _cv_and_exploits(out_dir, backend):
    # CV of 10 repeated profiles of one kernel (>= 20 us).
    mk, fn, ref = kernel_cases()["scale_shift"]
    medians = []
    for i in range(10):
        runs, _ = protocol.run_protocol([("scale_shift", fn)], mk, backend,
                                        protocol.ProtocolConfig(time_budget_s=0.5, min_samples=20, anchor=False),
                                        secret_seed=100 + i)
        medians.append(statistics.median(s["cupti_us"] for s in runs["scale_shift"]["samples"]))
    cv = statistics.stdev(medians) / statistics.mean(medians)
    json.dump({"kernel": "scale_shift", "medians_us": medians, "cv": cv},
              open(os.path.join(out_dir, "cv.json"), "w"), indent=1)
    print(f"cv over 10 profiles of scale_shift: {cv * 100:.3f}% (mean {statistics.mean(medians):.2f} us)", flush=True)

    exploit_cases(out_dir, backend)


def exploit_cases(out_dir, backend):
    so = os.environ["KERNELRL_TEST_KERNELS"]
    n = 32 << 20

    def mk2(seed):
        g = torch.Generator("cuda").manual_seed(seed)
        return [torch.rand(n, device="cuda", generator=g), torch.rand(n, device="cuda", generator=g)]

    def mkmm(seed):
        g = torch.Generator("cuda").manual_seed(seed)
        return [torch.rand(1024, 1024, device="cuda", generator=g), torch.rand(1024, 1024, device="cuda", generator=g)]

    add_ref = _close(lambda a, b: a + b)
    mm_ref = _close(lambda a, b: a @ b)
    scratch = torch.rand(4 << 20, device="cuda")
    scratch_out = torch.empty_like(scratch)
    state = {"started": False, "cached": None}

    def honest(a, b):
        return _run(lambda c: lib().kt_vec_add(P(a), P(b), P(c), ctypes.c_long(n), S()), a)

    def side_stream(a, b):
        return _run(lambda c: lib().kt_vec_add_side_stream(P(a), P(b), P(c), ctypes.c_long(n)), a)

    def thread(a, b):
        return _run(lambda c: lib().kt_vec_add_thread(P(a), P(b), P(c), ctypes.c_long(n)), a)

    def background(a, b):
        if not state["started"]:
            state["started"] = True
            ok(lib().kt_background_burner(P(scratch), P(scratch_out), ctypes.c_long(scratch.numel()), 4000))
        return honest(a, b)

    def torch_ops(a, b):
        return torch.add(a, b)

    def library_only(a, b):
        return torch.matmul(a, b)

    def honest_matmul(a, b):
        return _run(lambda c: lib().kt_matmul(P(a), P(b), P(c), 1024, S()), a)

    def caching(a, b):
        if state["cached"] is None:
            state["cached"] = honest(a, b)
        return state["cached"]

    cases = [
        ("honest_vec_add", honest, mk2, add_ref, {}, []),
        ("side_stream", side_stream, mk2, add_ref, {}, ["side_stream"]),
        ("thread_injection", thread, mk2, add_ref, {}, ["foreign_launch_thread"]),
        ("torch_ops_only", torch_ops, mk2, add_ref, {}, ["no_candidate_kernels"]),
        ("cublas_only_forbidden", library_only, mkmm, mm_ref, {"allow_cublas": False},
         ["library_only", "forbidden_library_cublas"]),
        ("honest_matmul", honest_matmul, mkmm, mm_ref, {"allow_cublas": False}, []),
        ("cached_output", caching, mk2, add_ref, {}, ["recheck_failed"]),
        # Last: its detached thread outlives the case.
        ("background_thread", background, mk2, add_ref, {}, ["work_outside_window"]),
    ]
    cfg = {"time_budget_s": 0.5, "min_samples": 20, "recheck_fraction": 0.3}
    with open(os.path.join(out_dir, "exploits.jsonl"), "w") as f:
        for name, fn, mk, ref, policy, expect in cases:
            torch.backends.cuda.matmul.allow_tf32 = True  # cuBLAS picks its fast kernels for the library case.
            res = profile.profile_candidate(fn, lambda k, mk=mk: mk(1000 + k), lambda o, i, ref=ref: ref(i, o),
                                            {"task_id": name, "device": "cuda", "library_policy": policy},
                                            budget_s=4.0, config=cfg, artifact_paths=[so], backend=backend)
            f.write(json.dumps({"case": name, "library_policy": policy, "expect": expect,
                                "measurement": res["measurement"]}) + "\n")
            m = json.dumps(res["measurement"])
            if name == "background_thread":
                lib().kt_stop_background()
            mj = json.loads(m)["candidate"]
            print(f"exploit {name:22s} samples={len(mj['samples'])} escaped_us={mj['outside_window_gpu_us']:.0f} "
                  f"streams={sorted({a['stream_id'] for a in mj['activities']})} err={mj['error'][:60]}", flush=True)
    torch.cuda.synchronize()


def ncu_target():
    """Each kernel 5 times, inputs fresh; ncu flushes caches itself (--cache-control all)."""
    for name, (mk, fn, ref) in kernel_cases().items():
        for i in range(5):
            x = mk(1000 + i)
            fn(*x)
            torch.cuda.synchronize()


if __name__ == "__main__":
    if sys.argv[1] == "cupti":
        cupti_checks(sys.argv[2])
    else:
        ncu_target()
