"""The health probe's device-memory rule: after a job, the device memory the
sandbox's own processes hold must be back to what the first probe found,
within a slack. Other tenants of the GPU (a learner decoding on it, another
job) are not the sandbox's leak, and must not take the worker out of service.

  device_used  total - free (torch.cuda.mem_get_info, in the probe process)
  foreign      what NVML attributes to processes that provably do not descend
               from the zygote (gpu_share.foreign_memory: /proc's parent
               links reach pid 1 without meeting it)
  own_used     device_used - foreign: our processes, the driver's own
               reservations, and memory no process claims

check() compares own_used with the baseline's own_used; where either probe
could not tell ours apart (no NVML, NVML's pids not in our pid namespace, a
foreign process without a memory figure, a job that could leave the zygote's
tree), it compares device_used with the baseline's device_used, the
whole-device rule, and `rule` says why.

Why subtracting the foreign processes cannot hide a candidate's leak: device
memory stays allocated only while a process holds it. The candidate's
executor is pid 1 of its own pid namespace, under a supervisor the zygote
forked, and from before the candidate's code is imported it runs under a
seccomp filter that kills fork, vfork and process-creating clone: every
process a candidate can leave behind is in the zygote's tree, and so is
counted. Memory no process claims stays in own_used. A pid whose parent
links cannot be read counts as ours. Only where a job ran with neither
seccomp nor a pid namespace could a candidate's process reparent outside the
tree (a double fork); the zygote then asks for the whole-device rule.
"""

WHOLE = "whole device: "


def processes(props):
    """(nvml.Processes for the CUDA device with torch properties `props`, "")
    or (None, why not)."""
    try:
        from profiler_service.harness import nvml
    except ImportError as e:
        return None, f"profiler_service.harness.nvml not importable ({e})"
    p = nvml.Processes(nvml.cuda_pci_bus_id(props))
    return (p, "") if p.available else (None, f"NVML unavailable: {p.error}")


def measure(total, free, procs, me, zygote, proc="/proc", why_not=""):
    """The probe's figures, taken in the probe process `me` (holding its CUDA
    context) right after mem_get_info: {"device_used", "own_used" (None where
    ours cannot be told apart), "rule"}. procs: nvml.Processes or a fake with
    used_memory(); why_not: a reason to use the whole-device rule."""
    out = {"device_used": int(total) - int(free), "own_used": None, "rule": ""}
    if not why_not and procs is None:
        why_not = "no NVML"
    if not why_not:
        try:
            from profiler_service.harness import gpu_share
            foreign, pids, why_not = gpu_share.foreign_memory(me, zygote, procs.used_memory(), proc)
        except Exception as e:  # noqa: BLE001 - no ownership figures: the whole-device rule
            why_not = f"{type(e).__name__}: {e}"[:200]
    if why_not:
        out["rule"] = WHOLE + why_not
        return out
    out["own_used"] = out["device_used"] - foreign
    out["rule"] = (f"own processes: {foreign >> 20} MiB of {len(pids)} other process(es) "
                   f"{pids[:8]} not counted" if pids else "own processes: no other process on the device")
    return out


def check(baseline, now, slack):
    """(healthy, error): memory back to the baseline's within `slack` bytes,
    counted the same way on both sides (the reply's memory_rule says how
    `now` was counted)."""
    if baseline.get("own_used") is not None and now.get("own_used") is not None:
        grown, what = now["own_used"] - baseline["own_used"], "held by the sandbox's processes"
    else:
        grown, what = now["device_used"] - baseline["device_used"], "used on the whole device"
        if now.get("own_used") is not None:
            what += " (the baseline's probe could not tell our processes apart)"
    if grown <= slack:
        return True, ""
    return False, f"device memory not back to baseline: {grown >> 20} MiB more {what}"
