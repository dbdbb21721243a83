"""Which NVIDIA driver, CUDA runtime and torch build work together, with exact remedies.

Rules from NVIDIA's CUDA compatibility guide: a driver runs any CUDA runtime up to the version it
reports (``CUDA Version`` in nvidia-smi); within one major version an older driver still runs a
newer minor runtime (minor-version compatibility) except for PTX JIT; a new major needs a driver
of at least the listed minimum. A torch build also only carries kernels for the GPU
architectures in ``torch.cuda.get_arch_list()``, and a cubin runs on later minors of its major
(:func:`code_for` has the rules): the official wheels' ``sm_86`` runs an L4 or RTX 4090
(``sm_89``) natively.
"""

from __future__ import annotations

from dataclasses import dataclass

from xirang.devices import (
    DRAIN,
    WARN,
    NodeReading,
    TorchBuild,
    VisibleDevices,
    blocker,
    caveat,
    everything,
    short,
    version_tuple,
)
from xirang.specs import HealthFinding

#: minimum Linux driver per CUDA major version (CUDA compatibility guide, table 2)
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
WHEELS = "https://download.pytorch.org/whl"
#: CUDA versions PyTorch publishes wheel indexes for (cu118, cu121, ...)
WHEEL_CUDAS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))
#: compute capabilities of Tegra/integrated GPUs (Jetson TX1/TX2/Xavier/Orin, Thor)
INTEGRATED = frozenset({53, 62, 72, 87, 101})
NATIVE, PTX, NONE = "native", "ptx", "none"


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


def check(
    node: NodeReading,
    build: TorchBuild,
    seen: TorchCuda,
    visible: VisibleDevices | None = None,
) -> list[HealthFinding]:
    """Every mismatch between the driver, torch's CUDA runtime and torch's GPU architectures;
    ``visible`` names the GPU behind each torch ordinal (default: every GPU, in order)."""
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
        findings += _torch_view(node, build, seen, visible or everything(node.usable))
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


def _torch_view(
    node: NodeReading, build: TorchBuild, seen: TorchCuda, visible: VisibleDevices
) -> list[HealthFinding]:
    if not seen.available:
        return [
            blocker(
                f"the driver lists {len(node.usable)} GPU(s) but torch {build.version} sees none "
                f"(torch.cuda.is_available() is False); check CUDA_VISIBLE_DEVICES and that the "
                f"process may open /dev/nvidia*"
            )
        ]
    jit_fails = _minor_compat_only(node, build)
    findings = []
    for (major, minor), ordinals in _by_capability(seen.capabilities).items():
        devices = [visible.devices[o] for o in ordinals if o < len(visible.devices)]
        models = ", ".join(sorted({d.model for d in devices})) or "unknown model"
        name = f"GPU {_span(ordinals)} ({models})"
        where = devices[0].index if len(ordinals) == 1 and devices else None
        how = code_for(major * 10 + minor, seen.arch_list)
        archs = ", ".join(seen.arch_list)
        if how == NONE:
            findings.append(
                HealthFinding(
                    where,
                    "compatibility",
                    DRAIN,
                    f"{name} is sm_{major}{minor}, which torch {build.version} has no kernels "
                    f"for (it has {archs}); install a torch build that includes sm_{major}{minor}",
                )
            )
        elif how == PTX:
            findings.append(_ptx_only(where, name, major, minor, build, archs, jit_fails))
    return findings


def _by_capability(capabilities: tuple[tuple[int, int], ...]) -> dict[tuple[int, int], list[int]]:
    """Torch ordinals per compute capability: one finding (one start-up line) per kind of GPU."""
    found: dict[tuple[int, int], list[int]] = {}
    for ordinal, capability in enumerate(capabilities):
        found.setdefault(capability, []).append(ordinal)
    return found


def _span(ordinals: list[int]) -> str:
    """``0`` or ``0-7`` (consecutive) or ``0,2,5``."""
    if len(ordinals) > 1 and ordinals == list(range(ordinals[0], ordinals[-1] + 1)):
        return f"{ordinals[0]}-{ordinals[-1]}"
    return ",".join(map(str, ordinals))


def _ptx_only(
    where: int | None,
    name: str,
    major: int,
    minor: int,
    build: TorchBuild,
    archs: str,
    jit_fails: bool,
) -> HealthFinding:
    """Only PTX applies: the driver compiles every kernel on first use (minutes at start-up,
    then cached), and cannot at all when it runs torch's CUDA through minor-version
    compatibility."""
    if jit_fails:
        return HealthFinding(
            where,
            "compatibility",
            DRAIN,
            f"{name} is sm_{major}{minor}: torch {build.version} has only PTX for it ({archs}), "
            f"and this driver runs CUDA {build.cuda} through minor-version compatibility, "
            f"which cannot JIT PTX; upgrade the driver or install a torch build with "
            f"sm_{major}{minor}",
        )
    return HealthFinding(
        where,
        "compatibility",
        WARN,
        f"{name} is sm_{major}{minor}: torch {build.version} has no native kernels for it, "
        f"only PTX ({archs}) that the driver JIT-compiles on first use (a slow first start, "
        f"then cached in ~/.nv/ComputeCache); a build with sm_{major}{minor} avoids it",
    )


def _minor_compat_only(node: NodeReading, build: TorchBuild) -> bool:
    """Whether the driver is older than torch's CUDA (same major): PTX JIT is then refused."""
    supported, needed = version_tuple(node.runtime, 2), version_tuple(build.cuda, 2)
    return bool(supported and needed and supported < needed)


def code_for(device_cc: int, arch_list: tuple[str, ...]) -> str:
    """How torch's build runs on a GPU of compute capability ``device_cc`` (``89`` for 8.9):
    ``native`` (a cubin that runs there), ``ptx`` (only PTX the driver can JIT) or ``none``.

    CUDA's rules (CUDA C++ Programming Guide, binary and PTX compatibility): a cubin for
    ``sm_XY`` runs on compute capability X.Z for every Z >= Y of the same major X; an
    arch-specific one (``sm_90a``) only on X.Y itself; a family one (``sm_100f``) like the plain
    cubin. PTX (``compute_XY``) JIT-compiles for X.Y and every later capability, of any major;
    arch-specific PTX only for X.Y. Tegra/integrated GPUs (5.3, 6.2, 7.2, 8.7, 10.1) and
    discrete GPUs run each other's cubins never.
    """
    found = NONE
    for arch in arch_list:
        parsed = _parse_arch(arch)
        if parsed is None:
            continue
        kind, code_cc, suffix = parsed
        if kind == "sm" and _cubin_runs(code_cc, suffix, device_cc):
            return NATIVE
        if kind == "compute" and _ptx_runs(code_cc, suffix, device_cc):
            found = PTX
    return found


def _parse_arch(arch: str) -> tuple[str, int, str] | None:
    """``sm_90a`` -> ("sm", 90, "a"); ``compute_89`` -> ("compute", 89, ""); else None."""
    kind, _, rest = arch.strip().lower().partition("_")
    digits = rest.rstrip("af")
    if kind not in ("sm", "compute") or not digits.isdigit():
        return None
    return kind, int(digits), rest[len(digits) :]


def _cubin_runs(code_cc: int, suffix: str, device_cc: int) -> bool:
    if suffix == "a" or INTEGRATED & {code_cc, device_cc}:
        return code_cc == device_cc
    return code_cc // 10 == device_cc // 10 and code_cc % 10 <= device_cc % 10


def _ptx_runs(code_cc: int, suffix: str, device_cc: int) -> bool:
    if suffix == "a":
        return code_cc == device_cc
    if suffix == "f":
        return _cubin_runs(code_cc, "", device_cc)
    return code_cc <= device_cc


def _wheel(driver_cuda: str) -> str:
    """The PyTorch wheel index for the newest CUDA this driver runs (cu121 for a 12.2 driver)."""
    version = version_tuple(driver_cuda, 2) or WHEEL_CUDAS[-1]
    fitting = [cuda for cuda in WHEEL_CUDAS if cuda <= version] or [WHEEL_CUDAS[0]]
    major, minor = fitting[-1]
    return f"{WHEELS}/cu{major}{minor}"
