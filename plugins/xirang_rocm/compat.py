"""Which ROCm install and torch build work together on AMD GPUs, with exact remedies.

torch runs AMD GPUs only from a ROCm build (``torch.version.hip`` set), and only on the GPU
architectures (``gfx942``, ``gfx90a``, ...) it was compiled for. A ROCm wheel brings its own HIP
runtime, so a mismatch with the host's ROCm release is usually survivable, but it is the first
thing to suspect when kernels fail to load.
"""

from __future__ import annotations

from dataclasses import dataclass

from xirang.devices import NodeReading, TorchBuild, blocker, caveat, short, version_tuple
from xirang.specs import HealthFinding

WHEELS = "https://download.pytorch.org/whl"


@dataclass(frozen=True)
class TorchRocm:
    """What torch sees of the GPUs through HIP (empty on other builds)."""

    available: bool = False
    count: int = 0
    arch_list: tuple[str, ...] = ()


def torch_rocm() -> TorchRocm:
    import torch

    if not (getattr(torch.version, "hip", None) and torch.cuda.is_available()):
        return TorchRocm()
    return TorchRocm(True, torch.cuda.device_count(), tuple(torch.cuda.get_arch_list()))


def check(
    node: NodeReading, build: TorchBuild, seen: TorchRocm, host_rocm: str
) -> list[HealthFinding]:
    """Mismatches between the host's ROCm, torch's HIP runtime and torch's GPU architectures."""
    wheel = _wheel(host_rocm)
    if not build.hip:
        return [
            blocker(
                f"torch {build.version} is a {build.flavour} but this host has AMD GPUs; "
                f"install the ROCm build: pip install torch --index-url {wheel}"
            )
        ]
    findings = []
    host, hip = version_tuple(host_rocm, 2), version_tuple(build.hip, 2)
    if host and hip and host != hip:
        findings.append(
            caveat(
                f"torch {build.version} carries HIP {short(hip)} but the host has ROCm "
                f"{short(host)}; if kernels fail to load (hipErrorNoBinaryForGpu, HSA errors) "
                f"install the matching build: pip install torch --index-url {wheel}"
            )
        )
    if not seen.available:
        findings.append(
            blocker(
                f"rocm-smi lists {len(node.usable)} GPU(s) but torch {build.version} sees none; "
                f"check HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES and that this user is in the "
                f"'render' and 'video' groups (access to /dev/kfd and /dev/dri)"
            )
        )
        return findings
    findings += [
        blocker(
            f"GPU {d.index} ({d.model}) is {d.extra['gfx']}, which torch {build.version} has no "
            f"kernels for (it has {', '.join(seen.arch_list)}); install a torch build for "
            f"{d.extra['gfx']}"
        )
        for d in node.usable
        if d.extra.get("gfx") and _arch(d.extra["gfx"]) not in map(_arch, seen.arch_list)
    ]
    return findings


def _arch(name: str) -> str:
    """``gfx90a:sramecc+:xnack-`` -> ``gfx90a``: feature flags do not change the ISA."""
    return name.split(":")[0].strip().lower()


def _wheel(host_rocm: str) -> str:
    version = version_tuple(host_rocm, 2)
    return f"{WHEELS}/rocm{short(version)}" if len(version) == 2 else f"{WHEELS}/rocm6.2"
