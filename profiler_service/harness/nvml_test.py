#!/usr/bin/env python3
"""nvml.py on CPU against a fake libnvidia-ml built here: two GPUs whose
NVML order differs from CUDA's (as under CUDA_VISIBLE_DEVICES), each with
its own clocks, temperature and throttle reasons drawn at random. A sample
must come from the GPU the bus id names, never from NVML's index 0."""
import os
import random
import subprocess
import sys
import tempfile
import unittest

ROOT = (os.path.join(os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "kernelrl"))
        if "TEST_SRCDIR" in os.environ else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)

from profiler_service.harness import nvml  # noqa: E402

FAKE = r"""
#include <string.h>
typedef struct { int id; } dev;
static dev devs[2] = {{0}, {1}};
static const char* bus[2] = {"%(bus0)s", "%(bus1)s"};
static unsigned long long reasons[2] = {%(reasons0)dULL, %(reasons1)dULL};
static unsigned clock[2] = {%(clock0)d, %(clock1)d}, temp[2] = {%(temp0)d, %(temp1)d};
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev** h) { if (i > 1) return 2; *h = &devs[i]; return 0; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* b, dev** h) {
  for (int i = 0; i < 2; ++i) if (strcmp(b, bus[i]) == 0) { *h = &devs[i]; return 0; }
  return 6;
}
int nvmlDeviceGetCurrentClocksEventReasons(dev* h, unsigned long long* r) { *r = reasons[h->id]; return 0; }
int nvmlDeviceGetClockInfo(dev* h, int type, unsigned* c) { if (type != 1) return 2; *c = clock[h->id]; return 0; }
int nvmlDeviceGetTemperature(dev* h, int sensor, unsigned* t) { if (sensor != 0) return 2; *t = temp[h->id]; return 0; }
int nvmlSystemGetDriverVersion(char* v, unsigned n) { strncpy(v, "580.65.06", n); return 0; }
"""


class NvmlTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        r = random.Random()
        self.gpu = []
        for i in range(2):
            self.gpu.append({"bus": f"00000000:{r.randrange(16, 255):02x}:00.0",
                             "reasons": r.choice([0, 0x1, 0x4, 0x20, 0x4 | 0x40]),
                             "clock": r.randrange(345, 1980), "temp": r.randrange(25, 90)})
        while self.gpu[1]["bus"] == self.gpu[0]["bus"]:
            self.gpu[1]["bus"] = f"00000000:{r.randrange(16, 255):02x}:00.0"
        fields = {f"{k}{i}": g[k] for i, g in enumerate(self.gpu) for k in g}
        src = os.path.join(self.dir, "fake_nvml.c")
        with open(src, "w") as f:
            f.write(FAKE % fields)
        lib = os.path.join(self.dir, "libnvidia-ml.so.1")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
        self.saved, nvml.LIBRARY = nvml.LIBRARY, lib

    def tearDown(self):
        nvml.LIBRARY = self.saved

    def expect(self, sample, g):
        reasons, throttled, clock, temp = sample
        self.assertEqual((reasons, clock, temp), (g["reasons"], g["clock"], g["temp"]))
        self.assertEqual(throttled, bool(g["reasons"] & nvml.SLOWING_REASONS))

    def test_the_bus_id_picks_the_gpu_not_nvml_index_zero(self):
        second = nvml.Nvml(self.gpu[1]["bus"])
        self.assertTrue(second.available, second.error)
        self.expect(second.sample(), self.gpu[1])
        self.expect(nvml.Nvml(self.gpu[0]["bus"]).sample(), self.gpu[0])
        self.assertEqual(second.driver_version(), "580.65.06")

    def test_unknown_bus_id_is_unavailable_and_never_throttled(self):
        n = nvml.Nvml("00000000:00:1f.0")
        self.assertFalse(n.available)
        self.assertIn("00000000:00:1f.0", n.error)
        self.assertEqual(n.sample(), (0, False, 0, 0))
        self.assertEqual(n.driver_version(), "")

    def test_no_bus_id_reads_index_zero(self):
        self.expect(nvml.Nvml("").sample(), self.gpu[0])


if __name__ == "__main__":
    unittest.main()
