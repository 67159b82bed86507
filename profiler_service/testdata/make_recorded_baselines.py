#!/usr/bin/env python3
"""Writes h100_recorded_baselines.jsonl from h100_exploits.jsonl.

The exploit run (profiler_service/harness/device/checks.py, H100, one process)
timed, on the very inputs every case of a task used, the reference op itself
as a candidate: torch.add for the 32M-element vec-add cases ("torch_ops_only")
and torch.matmul for the 1024^3 matmul cases ("cublas_only_forbidden", TF32 as
the run set it). Those runs are the eager baselines of the two tasks, recorded
under the same protocol, clock (CUPTI) and anchor as the candidates they judge.
No torch.compile run was recorded, so the compile baseline stays empty (every
speed-up against it is 0, which never pays more than reward 2).
One BaselineMeasurement JSON line per task: {"task_id", "eager", "anchor",
"device", "work", "input_policy_hash"}.
"""
import json
import os
import sys

EAGER_OF_TASK = {"vec_add_32M": "torch_ops_only", "matmul_1024": "cublas_only_forbidden"}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    cases = {}
    with open(os.path.join(here, "h100_exploits.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            cases[d["case"]] = d["measurement"]
    out = os.path.join(here, "h100_recorded_baselines.jsonl")
    with open(out, "w") as f:
        for task, case in EAGER_OF_TASK.items():
            m = cases[case]
            eager = dict(m["candidate"], label="eager")
            bm = {"task_id": task, "eager": eager, "anchor": m.get("anchor", {}), "device": m["device"],
                  "work": m.get("work", {}), "input_policy_hash": m.get("input_policy_hash", "")}
            f.write(json.dumps(bm, sort_keys=True) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
