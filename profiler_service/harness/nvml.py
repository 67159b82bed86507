"""GPU clocks, temperature and throttle reasons through NVML (pynvml), read
after every timed call. Without pynvml or a GPU every sample reads as "not
throttled" and the run notes nvml_unavailable."""

# Clock-event reasons that lower clocks below what was asked for
# (nvmlClocksEventReason*): SW power cap, HW slowdown, SW thermal, HW thermal,
# HW power brake. GPU idle (0x1), applications clocks (0x2) and sync boost
# (0x10) do not slow a running kernel.
SLOWING_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


class Nvml:
    def __init__(self, index=0):
        self.available = False
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nv = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.available = True
        except Exception as e:  # No pynvml, no driver: timing still runs.
            self.error = f"{type(e).__name__}: {e}"

    def sample(self):
        """(throttle_reasons, throttled, sm_clock_mhz, temperature_c)."""
        if not self.available:
            return 0, False, 0, 0
        nv = self._nv
        get_reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        reasons = int(get_reasons(self._h))
        clock = int(nv.nvmlDeviceGetClockInfo(self._h, nv.NVML_CLOCK_SM))
        temp = int(nv.nvmlDeviceGetTemperature(self._h, nv.NVML_TEMPERATURE_GPU))
        return reasons, bool(reasons & SLOWING_REASONS), clock, temp
