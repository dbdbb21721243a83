"""Which NVIDIA driver, CUDA runtime and torch build work together, with exact remedies.

Rules from NVIDIA's CUDA compatibility guide: a driver runs any CUDA runtime up to the version it
reports (``CUDA Version`` in nvidia-smi); within one major version an older driver still runs a
newer minor runtime (minor-version compatibility) except for PTX JIT; a new major needs a driver
of at least the listed minimum. A torch build also only carries kernels for the GPU
architectures in ``torch.cuda.get_arch_list()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xirang_core.devices.compat import TorchBuild, blocker, caveat, short, version_tuple
from xirang_core.devices.reading import NodeReading
from xirang_core.specs import HealthFinding

#: minimum Linux driver per CUDA major version (CUDA compatibility guide, table 2)
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
WHEELS = "https://download.pytorch.org/whl"
#: CUDA versions PyTorch publishes wheel indexes for (cu118, cu121, ...)
WHEEL_CUDAS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))


@dataclass(frozen=True)
class TorchCuda:
    """What torch itself sees of the GPUs (empty on a CPU-only build)."""

    available: bool = False
    count: int = 0
    capabilities: tuple[tuple[int, int], ...] = ()
    arch_list: tuple[str, ...] = ()


def torch_cuda() -> TorchCuda:
    import torch

    if not torch.cuda.is_available():
        return TorchCuda()
    count = torch.cuda.device_count()
    return TorchCuda(
        True,
        count,
        tuple(torch.cuda.get_device_capability(i) for i in range(count)),
        tuple(torch.cuda.get_arch_list()),
    )


def check(node: NodeReading, build: TorchBuild, seen: TorchCuda) -> list[HealthFinding]:
    """Every mismatch between the driver, torch's CUDA runtime and torch's GPU architectures."""
    wheel = _wheel(node.runtime)
    if build.hip:
        return [
            blocker(
                f"torch {build.version} is a ROCm build (HIP {build.hip}) but this host has NVIDIA "
                f"GPUs; install a CUDA build: pip install torch --index-url {wheel}"
            )
        ]
    if not build.cuda:
        return [
            blocker(
                f"torch {build.version} is a CPU-only build; to use the {len(node.usable)} NVIDIA "
                f"GPU(s) install a CUDA build: pip install torch --index-url {wheel}"
            )
        ]
    findings = _driver_vs_runtime(node, build, wheel)
    if not findings or findings[0].severity != "drain":
        findings += _torch_view(node, build, seen)
    return findings


def _driver_vs_runtime(node: NodeReading, build: TorchBuild, wheel: str) -> list[HealthFinding]:
    supported, needed = version_tuple(node.runtime, 2), version_tuple(build.cuda, 2)
    if not supported or not needed or supported >= needed:
        return []
    if supported[0] < needed[0]:
        minimum = MIN_DRIVER.get(needed[0], "a newer release")
        return [
            blocker(
                f"NVIDIA driver {node.driver} supports CUDA up to {short(supported)}, but torch "
                f"{build.version} is built for CUDA {build.cuda}: upgrade the driver to "
                f">= {minimum}, or install torch for CUDA {short(supported)}: "
                f"pip install torch --index-url {wheel}"
            )
        ]
    return [
        caveat(
            f"NVIDIA driver {node.driver} supports CUDA {short(supported)}, older than torch's "
            f"CUDA {build.cuda}; it runs through minor-version compatibility, but kernels that "
            f"need PTX JIT fail ('unsupported toolchain'); upgrade the driver if they do"
        )
    ]


def _torch_view(node: NodeReading, build: TorchBuild, seen: TorchCuda) -> list[HealthFinding]:
    if not seen.available:
        return [
            blocker(
                f"the driver lists {len(node.usable)} GPU(s) but torch {build.version} sees none "
                f"(torch.cuda.is_available() is False); check CUDA_VISIBLE_DEVICES and that the "
                f"process may open /dev/nvidia*"
            )
        ]
    return [
        blocker(
            f"GPU {i} ({_model(node, i)}) is sm_{major}{minor}, which torch {build.version} has "
            f"no kernels for (it has {', '.join(seen.arch_list)}); install a torch build that "
            f"includes sm_{major}{minor}"
        )
        for i, (major, minor) in enumerate(seen.capabilities)
        if not _runs_on(major, minor, seen.arch_list)
    ]


def _runs_on(major: int, minor: int, arch_list: tuple[str, ...]) -> bool:
    """Native code for the architecture, or PTX of an older one that the driver can JIT."""
    target = major * 10 + minor
    for arch in arch_list:
        kind, _, number = arch.partition("_")
        digits = int("".join(ch for ch in number if ch.isdigit()) or 0)
        if (kind == "sm" and digits == target) or (kind == "compute" and digits <= target):
            return True
    return False


def _model(node: NodeReading, index: int) -> str:
    return next((d.model for d in node.usable if d.index == index), "unknown model")


def _wheel(driver_cuda: str) -> str:
    """The PyTorch wheel index for the newest CUDA this driver runs (cu121 for a 12.2 driver)."""
    version = version_tuple(driver_cuda, 2) or WHEEL_CUDAS[-1]
    fitting = [cuda for cuda in WHEEL_CUDAS if cuda <= version] or [WHEEL_CUDAS[0]]
    major, minor = fitting[-1]
    return f"{WHEELS}/cu{major}{minor}"
