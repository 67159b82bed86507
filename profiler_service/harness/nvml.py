"""NVML through the driver's own library (libnvidia-ml.so.1, ctypes; no
pynvml needed), on the CUDA device picked by its PCI bus id.

Nvml: GPU clocks, temperature and throttle reasons, read after every timed
call. Without the library or a GPU every sample reads as "not throttled" and
the run notes nvml_unavailable.

Processes: which pids hold a context on the GPU, the device memory each holds
(the sandbox's health probe) and the driver's per-process utilisation samples
(gpu_share.py)."""
import ctypes

# Clock-event reasons that lower clocks below what was asked for
# (nvmlClocksEventReason*): SW power cap, HW slowdown, SW thermal, HW thermal,
# HW power brake. GPU idle (0x1), applications clocks (0x2) and sync boost
# (0x10) do not slow a running kernel.
SLOWING_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


class _ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2 and v3)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _UtilSample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


LIBRARY = "libnvidia-ml.so.1"  # The driver's; tests load a fake in its place.
_SUCCESS, _NOT_FOUND, _INSUFFICIENT_SIZE = 0, 6, 7
_VALUE_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE in an unsigned long long


class _Device:
    """The driver's NVML library and one device's handle. pci_bus_id: the
    CUDA device's ("domain:bus:device.0", cuda_pci_bus_id), since NVML numbers
    devices without regard to CUDA_VISIBLE_DEVICES (an index would read
    another GPU); "" (unknown): NVML's index 0."""

    def __init__(self, pci_bus_id=""):
        self.available = False
        self.error = ""
        self.device = pci_bus_id or "index 0"
        try:
            lib = ctypes.CDLL(LIBRARY)
            rc = lib.nvmlInit_v2()
            if rc != _SUCCESS:
                raise OSError(f"nvmlInit_v2 returned {rc}")
            self._h = ctypes.c_void_p()
            if pci_bus_id:
                rc = lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(self._h))
            else:
                rc = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0), ctypes.byref(self._h))
            if rc != _SUCCESS:
                raise OSError(f"NVML device handle ({self.device}) returned {rc}")
            self._lib = lib
            self.available = True
        except (OSError, AttributeError) as e:
            self.error = f"{type(e).__name__}: {e}"


class Processes(_Device):
    """The two process queries."""

    def _compute_processes(self):
        fn = getattr(self._lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
            self._lib.nvmlDeviceGetComputeRunningProcesses_v2
        cap = 64
        while True:
            infos, count = (_ProcessInfo * cap)(), ctypes.c_uint(cap)
            rc = fn(self._h, ctypes.byref(count), infos)
            if rc == _INSUFFICIENT_SIZE and count.value > cap:
                cap = count.value + 8
                continue
            if rc != _SUCCESS:
                raise OSError(f"nvmlDeviceGetComputeRunningProcesses returned {rc}")
            return [infos[i] for i in range(min(count.value, cap))]

    def running_pids(self):
        """Pids holding a compute context on this GPU (as the driver reports them to us)."""
        return {int(p.pid) for p in self._compute_processes()}

    def used_memory(self):
        """{pid: device bytes} of the processes holding a compute context on
        this GPU; None where the driver gives no figure (some containers and
        MIG set NVML_VALUE_NOT_AVAILABLE). A pid listed twice is summed."""
        used = {}
        for p in self._compute_processes():
            pid, b = int(p.pid), int(p.usedGpuMemory)
            unknown = b == _VALUE_NOT_AVAILABLE or (pid in used and used[pid] is None)
            used[pid] = None if unknown else used.get(pid, 0) + b
        return used

    def process_samples(self, since_us):
        """(pid, timestamp_us, sm_util, mem_util) of the per-process utilisation
        samples the driver recorded after `since_us` (CPU time, microseconds)."""
        cap = 256
        while True:
            buf, count = (_UtilSample * cap)(), ctypes.c_uint(cap)
            rc = self._lib.nvmlDeviceGetProcessUtilization(self._h, buf, ctypes.byref(count),
                                                           ctypes.c_ulonglong(int(since_us)))
            if rc == _NOT_FOUND:  # no sample since then
                return []
            if rc == _INSUFFICIENT_SIZE and count.value > cap:
                cap = count.value + 64
                continue
            if rc != _SUCCESS:
                raise OSError(f"nvmlDeviceGetProcessUtilization returned {rc}")
            return [(int(buf[i].pid), int(buf[i].timeStamp), int(buf[i].smUtil), int(buf[i].memUtil))
                    for i in range(min(count.value, cap))]


class Nvml(_Device):
    """Clocks, temperature and throttle reasons of the device."""

    _CLOCK_SM, _TEMPERATURE_GPU = 1, 0  # nvmlClockType_t, nvmlTemperatureSensors_t

    def _get(self, fn, *args, kind=ctypes.c_uint):
        out = kind()
        rc = fn(self._h, *args, ctypes.byref(out))
        if rc != _SUCCESS:
            raise OSError(f"{fn.__name__} returned {rc}")
        return int(out.value)

    def sample(self):
        """(throttle_reasons, throttled, sm_clock_mhz, temperature_c)."""
        if not self.available:
            return 0, False, 0, 0
        lib = self._lib
        get_reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            lib.nvmlDeviceGetCurrentClocksThrottleReasons
        reasons = self._get(get_reasons, kind=ctypes.c_ulonglong)
        clock = self._get(lib.nvmlDeviceGetClockInfo, ctypes.c_int(self._CLOCK_SM))
        temp = self._get(lib.nvmlDeviceGetTemperature, ctypes.c_int(self._TEMPERATURE_GPU))
        return reasons, bool(reasons & SLOWING_REASONS), clock, temp

    def driver_version(self):
        if not self.available:
            return ""
        buf = ctypes.create_string_buffer(96)
        rc = self._lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(len(buf)))
        return buf.value.decode() if rc == _SUCCESS else ""


def cuda_pci_bus_id(props):
    """NVML's bus id string for a torch CUDA device's properties ("" if unknown)."""
    try:
        return f"{int(props.pci_domain_id):08x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}.0"
    except (AttributeError, TypeError, ValueError):
        return ""
