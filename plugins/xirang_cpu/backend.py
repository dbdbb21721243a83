"""Inventory, topology, health and calibration of the host CPU."""

from __future__ import annotations

import os
import platform
import shutil
from typing import TYPE_CHECKING

from xirang.devices import cached_calibration, measure_matmul_tflops, measure_memory_bandwidth_gbps
from xirang.specs import (
    Calibration,
    DeviceBackendBase,
    DeviceInfo,
    HealthFinding,
    InterconnectGroup,
    Topology,
)

if TYPE_CHECKING:  # torch is imported by the methods that use it: `xirang plugins` asks
    import torch  # present() of every device backend and must not wait for torch

#: matmul edge for calibration: each call long enough (~10 ms on two cores) that the threads'
#: barrier waits on a busy host do not dominate it, as they did at 512
CALIBRATION_MATMUL_SIZE = 1024
#: free memory below this fraction of the total makes the host unfit for new work
LOW_MEMORY_FRACTION = 0.05
#: instruction sets that decide how fast torch's CPU matmuls run per dtype (x86 and Arm
#: names as /proc/cpuinfo spells them): part of the calibration's cache key
MATMUL_ISA = frozenset(
    {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
     "amx_bf16", "amx_fp16", "asimd", "sve", "sve2", "bf16", "i8mm"}
)  # fmt: skip
#: the instruction sets that compute bf16 natively; without them torch's bf16 matmul is emulated
#: (AVX-512 alone, 2.8x slower than fp32 on an Ice Lake Xeon) or a generic loop (AVX2)
NATIVE_BF16_ISA = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


class CpuBackend(DeviceBackendBase):
    """The whole host CPU counts as one device; worker processes share its cores."""

    type = "cpu"
    #: several worker processes may share the host CPU, each with its share of the cores
    shareable = True

    def detect(self) -> tuple[bool, str]:
        return True, "the host CPU is always available"

    def inventory(self) -> list[DeviceInfo]:
        import torch

        return [
            DeviceInfo(
                type="cpu",
                index=0,
                model=cpu_model(),
                memory_bytes=_total_memory(),
                runtime=f"torch {torch.__version__}",
                extra={"cores": os.cpu_count() or 1, "arch": platform.machine()},
            )
        ]

    def topology(self) -> Topology:
        return Topology(groups=(InterconnectGroup(name="host", link="node", devices=(0,)),))

    def health(self) -> list[HealthFinding]:
        total, free = _total_memory(), _available_memory()
        if total and free / total < LOW_MEMORY_FRACTION:
            return [
                HealthFinding(0, "memory", "warn", f"only {free / 2**30:.1f} GiB of memory is free")
            ]
        usage = shutil.disk_usage("/")
        if usage.free / usage.total < LOW_MEMORY_FRACTION:
            return [
                HealthFinding(0, "disk", "warn", f"root disk {usage.free / 2**30:.1f} GiB free")
            ]
        return [HealthFinding(0, "memory", "ok", f"{free / 2**30:.1f} GiB free")]

    def calibrate(self, refresh: bool = False) -> Calibration:
        import torch

        threads = torch.get_num_threads()
        return cached_calibration(
            calibration_key(threads), lambda: self._measure(threads), refresh, cores=threads
        )

    def _measure(self, threads: int) -> Calibration:
        import torch

        device = torch.device("cpu")
        return Calibration(
            device_model=cpu_model(),
            matmul_tflops=measure_matmul_tflops(
                device, ["float32", "bfloat16"], size=CALIBRATION_MATMUL_SIZE, seconds=0.6
            ),
            memory_bandwidth_gbps=measure_memory_bandwidth_gbps(device, mbytes=64),
        )

    def supports_dtype(self, name: str) -> bool:
        """Whether training can compute in ``name`` (a torch dtype name) here: float32 always;
        bfloat16 and float16 where torch's CPU autocast runs them."""
        if name == "float32":
            return True
        import torch

        return torch.amp.autocast_mode.is_autocast_available("cpu") and name in (
            "bfloat16",
            "float16",
        )

    def torch_device(self, local_rank: int) -> torch.device:
        import torch

        return torch.device("cpu")

    def collective_backend(self) -> str:
        return "gloo"


def calibration_key(threads: int) -> str:
    """Names what the figures depend on. The instruction sets are in it because cloud VMs
    report generic model names ("Intel(R) Xeon(R) Processor @ 2.80GHz" on hosts with and
    without AMX), and a home on a shared disk, or a VM moved to other hardware, would otherwise
    read one CPU's bf16 figure on another and pick the wrong precision.
    v2: dtypes measured in turns on larger matmuls (v1 entries could hold a bf16 figure
    measured during a burst of other work, at 0.001 TFLOP/s)."""
    import torch

    isa = "+".join(sorted(cpu_flags() & MATMUL_ISA)) or "baseline"
    return f"cpu-{cpu_model()}-{isa}-{threads}threads-torch{torch.__version__}-v2"


def has_native_bf16() -> bool:
    """Whether this CPU computes bf16 matmuls in hardware (AVX-512 BF16, AMX, Arm BF16)."""
    return bool(cpu_flags() & NATIVE_BF16_ISA)


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (``flags`` on x86, ``Features`` on
    Arm); empty where there is no /proc."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _total_memory()
