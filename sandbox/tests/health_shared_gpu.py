#!/usr/bin/env python3
"""GPU check of the health probe's memory rule (sandbox/harness/device_memory.py)
through the real zygote: a first health job fixes the baseline; then another
process, not the zygote's, takes 1300 MiB of device memory (as a learner
decoding on the same GPU does) and a second health job must stay healthy,
saying in memory_rule that the other process was not counted. Prints both
replies and PASS/FAIL; exit 1 on FAIL. Run by tools/device_confine.sh (step 4).

    python3 sandbox/tests/health_shared_gpu.py CONTAIN_LIB"""
import json
import os
import subprocess
import sys

HOLD = ("import sys, torch\n"
        "x = torch.empty(1300 << 20, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize()\n"
        "print('ready', flush=True); sys.stdin.read()\n")


def main():
    lib = sys.argv[1]
    zyg = subprocess.Popen([sys.executable, "sandbox/harness/zygote.py", "--contain-lib", lib, "--device", "cuda",
                            "--profiler-root", os.getcwd()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hello = json.loads(zyg.stdout.readline())
    print("hello:", json.dumps(hello.get("hello", hello))[:300], flush=True)

    def health(n):
        zyg.stdin.write(json.dumps({"kind": "health", "job_id": f"h{n}", "wall_seconds": 60,
                                    "memory_slack_bytes": 512 << 20}) + "\n")
        zyg.stdin.flush()
        rep = json.loads(zyg.stdout.readline())
        print(f"health {n}:", json.dumps(rep), flush=True)
        return rep.get("health", {})

    other = None
    try:
        base = health(0)
        other = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert other.stdout.readline().strip() == "ready", "the other process did not take its memory"
        print(subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"],
                             capture_output=True, text=True).stdout, flush=True)
        shared = health(1)
        rule = shared.get("memory_rule", "")
        checks = {
            "baseline probe healthy": base.get("healthy") is True,
            "probe healthy beside a 1300 MiB foreign process": shared.get("healthy") is True,
            "memory_rule: own processes": rule.startswith("own processes"),
            f"memory_rule names the other process {other.pid}": str(other.pid) in rule,
            "whole device grew by >= 1200 MiB": base.get("free_bytes", 0) - shared.get("free_bytes", 0) >= 1200 << 20,
        }
    finally:
        if other is not None:
            other.stdin.close()
            other.wait()
        zyg.stdin.close()
        zyg.wait()
    for what, ok in checks.items():
        print(("PASS " if ok else "FAIL ") + what)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
