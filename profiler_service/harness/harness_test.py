"""CPU tests of the timing harness: the protocol's logic on the wall-clock
backend (adaptive stop, rechecks, fresh addresses, interleaving), the
sandbox seam's JSON, and the precompute on a tiny task."""
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import unittest

import torch

from profiler_service.harness import backends, precompute, protocol, symbols, tasks

HERE = os.path.dirname(os.path.abspath(__file__))
torch.set_num_threads(1)  # CI has 2 cores shared with other tests.


def make_cfg(**kw):
    base = dict(target_rse=0.01, time_budget_s=2.0, min_samples=10, max_samples=1000, warmup_calls=3,
                recheck_fraction=0.1, min_rechecks=0)
    base.update(kw)
    return protocol.ProtocolConfig(**base)


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(1 << 16, generator=g) * 2 - 1]


def recheck(inputs, out):
    return bool(torch.equal(out, torch.relu(inputs[0])))


def cpu_backend():
    return backends.CpuBackend(flush_multiple=2.0 * (4 << 20) / backends._cpu_llc_bytes())


class ProtocolTest(unittest.TestCase):
    def test_rel_std_error_matches_the_cpp_definition(self):
        # Same numbers as profiler_service/stats_test.cc.
        self.assertAlmostEqual(protocol.rel_std_error([9, 10, 11, 10]), math.sqrt(2 / 3) / 2 / 10, places=12)
        self.assertTrue(math.isinf(protocol.rel_std_error([10])))

    def test_adaptive_run_rechecks_and_fresh_addresses(self):
        ptrs = []

        def candidate(x):
            ptrs.append(x.data_ptr())
            # A 2 ms call: a scheduler stall on a loaded 2-core CI machine is
            # small next to it (a bare 20 us relu let one 1 ms stall keep the
            # RSE above 50% for all 60 samples).
            time.sleep(0.002)
            return torch.relu(x)

        cfg = make_cfg(time_budget_s=1.0, min_samples=10, max_samples=60, recheck_fraction=0.5,
                                      target_rse=0.5)
        runs, anchor = protocol.run_protocol([("candidate", candidate)], make_inputs, cpu_backend(), cfg, 42,
                                             recheck=recheck)
        r = runs["candidate"]
        self.assertEqual(r["error"], "")
        self.assertGreaterEqual(len(r["samples"]), 10)
        self.assertEqual(r["stop_reason"], "rse_target")  # 50% target: converges at min_samples.
        self.assertGreater(r["rechecks"], 0)
        self.assertEqual(r["recheck_failures"], 0)
        self.assertTrue(all(s["wall_us"] > 0 for s in r["samples"]))
        # Every call saw inputs at a different address from the call before it.
        self.assertTrue(all(a != b for a, b in zip(ptrs, ptrs[1:])))
        self.assertGreaterEqual(len(anchor["samples"]), 2)

    def test_tight_target_stops_on_the_budget(self):
        cfg = make_cfg(time_budget_s=0.2, min_samples=5, max_samples=100000, target_rse=1e-9)
        t0 = time.monotonic()
        runs, _ = protocol.run_protocol([("c", torch.relu)], make_inputs, cpu_backend(), cfg, 1)
        self.assertEqual(runs["c"]["stop_reason"], "time_budget")
        self.assertLess(time.monotonic() - t0, 5.0)

    def test_cached_output_fails_the_unannounced_recheck(self):
        cache = {}

        def caching(x):
            if "out" not in cache:
                cache["out"] = torch.relu(x)
            return cache["out"]

        cfg = make_cfg(time_budget_s=0.5, min_samples=20, max_samples=20, recheck_fraction=0.3)
        runs, _ = protocol.run_protocol([("c", caching)], make_inputs, cpu_backend(), cfg, 7, recheck=recheck)
        self.assertGreater(runs["c"]["recheck_failures"], 0)

    def test_interleaved_callables_keep_their_own_samples(self):
        def slow(x):
            time.sleep(0.02)
            return torch.relu(x)

        cfg = make_cfg(time_budget_s=0.5, min_samples=10, max_samples=10, block_calls=5)
        runs, _ = protocol.run_protocol([("fast", torch.relu), ("slow", slow)], make_inputs, cpu_backend(), cfg, 3)
        med = {k: sorted(s["wall_us"] for s in v["samples"])[5] for k, v in runs.items()}
        self.assertEqual(len(runs["fast"]["samples"]), 10)
        self.assertEqual(len(runs["slow"]["samples"]), 10)
        self.assertGreater(med["slow"], med["fast"] + 15000)

    def test_a_raising_candidate_is_recorded_as_its_error(self):
        def broken(x):
            raise RuntimeError("boom")

        runs, _ = protocol.run_protocol([("candidate", broken)], make_inputs, cpu_backend(),
                                        make_cfg(), 1, error_prefix={"candidate": "candidate"})
        self.assertTrue(runs["candidate"]["error"].startswith("candidate: RuntimeError: boom"))


class PrecomputeTest(unittest.TestCase):
    def test_eager_baseline_for_a_tiny_task(self):
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "level1"))
        src = open(os.path.join(HERE, "..", "testdata", "tiny_task.py")).read()
        with open(os.path.join(root, "level1", "1_Tiny.py"), "w") as f:
            f.write(src)
        with open(os.path.join(root, "level1", "2_Broken.py"), "w") as f:
            f.write("raise ImportError('no such task')\n")
        out = os.path.join(root, "b.jsonl")
        precompute.main(["--tasks_root", root, "--out", out, "--device", "cpu", "--workers", "1",
                         # 2 s, not 0.5: on a loaded 2-core CI machine 0.5 s gave 5 samples.
                         "--budget_s", "2.0", "--no_compile",
                         "--flush_multiple", str(2.0 * (4 << 20) / backends._cpu_llc_bytes())])
        with open(out) as f:
            recs = {r["task_id"]: r for r in map(json.loads, f)}
        self.assertEqual(set(recs), {"level1/1_Tiny", "level1/2_Broken"})
        tiny = recs["level1/1_Tiny"]
        self.assertGreaterEqual(len(tiny["eager"]["samples"]), 10)
        self.assertEqual(tiny["task_hash"], tasks.task_hash(src, "cpu"))
        self.assertEqual(tiny["work"]["flops"], 2 * 64 * 256 * 256)
        self.assertIn("ImportError", recs["level1/2_Broken"]["error"])

    def test_warm_up_keeps_no_autotune_winner(self):
        """The warm-up compiles and first-runs each model with inductor's
        autotune winners unkept (chosen beside other workers on one GPU);
        a timed precompute keeps them. A fake compile records the setting
        at the compile and at the first call."""
        import argparse
        import torch._inductor.config as inductor_config
        seen = []

        def fake_compile(model):
            seen.append(("compile", inductor_config.autotune_local_cache))

            def call(*xs):
                seen.append(("call", inductor_config.autotune_local_cache))
                return model(*xs)
            return call
        path = os.path.join(HERE, "..", "testdata", "tiny_task.py")
        args = argparse.Namespace(device="cpu", compile=True, warm_only=True)
        real = torch.compile
        torch.compile = fake_compile
        try:
            rec = precompute.measure_task("level1/1_Tiny", path, args, cpu_backend(), None)
        finally:
            torch.compile = real
        self.assertEqual(rec["error"], "warm_only: compiled, not timed")
        self.assertEqual(seen, [("compile", False), ("call", False)])
        self.assertTrue(inductor_config.autotune_local_cache)  # restored after the task


if __name__ == "__main__":
    unittest.main()
