"""Version arithmetic and the torch build, for the driver/runtime/torch checks of each backend.

The checks themselves are vendor knowledge and live with each backend; what they share is reading
the torch build (CUDA, ROCm/HIP or CPU-only) and comparing dotted versions that tools print with
suffixes (``12.4``, ``6.1.40091-a8dbc0c19``, ``23.0.rc3``, ``2.1.0.post3``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xirang.devices.health import DRAIN, WARN
from xirang_core.specs import HealthFinding


def version_tuple(text: str | None, parts: int = 3) -> tuple[int, ...]:
    """The leading numeric components of a version string, at most ``parts`` of them."""
    numbers: list[int] = []
    for piece in re.split(r"[.\-+_ ]", (text or "").strip()):
        if not piece.isdigit():
            break
        numbers.append(int(piece))
    return tuple(numbers[:parts])


def short(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class TorchBuild:
    """What the installed torch was compiled for: ``cuda`` and ``hip`` are None when absent."""

    version: str
    cuda: str | None
    hip: str | None

    @property
    def flavour(self) -> str:
        if self.hip:
            return f"ROCm build (HIP {self.hip})"
        if self.cuda:
            return f"CUDA build (CUDA {self.cuda})"
        return "CPU-only build"


def torch_build() -> TorchBuild:
    import torch

    return TorchBuild(
        torch.__version__,
        getattr(torch.version, "cuda", None),
        getattr(torch.version, "hip", None),
    )


def blocker(message: str) -> HealthFinding:
    """A compatibility problem that stops the device family from being used at all."""
    return HealthFinding(None, "compatibility", DRAIN, message)


def caveat(message: str) -> HealthFinding:
    """A mismatch that usually works but explains failures when it does not."""
    return HealthFinding(None, "compatibility", WARN, message)
