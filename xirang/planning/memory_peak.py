"""The real peak memory of a worker over a baseline, as the operating system or the device's
allocator sees it.

:mod:`xirang.planning.meter` counts the tensors of the categories the predictor models;
this counts everything else too: allocator overhead and caching, temporaries, communication
buffers, the autograd graph. On a CPU the figure is the process's peak resident set (Linux
``VmHWM``, reset through ``/proc/self/clear_refs`` at the baseline) less its resident set at the
baseline; on CUDA and ROCm it is the allocator's ``max_memory_allocated`` (and ``reserved``) over
the memory allocated at the baseline. Memory the allocator kept from before the baseline and
reuses is not seen again, so take the baseline in a fresh worker, before the model is built;
on a CPU :meth:`RealPeak.start` first hands what glibc's malloc keeps of freed memory back to the
system (``malloc_trim``), so memory an earlier run in the same worker freed counts again when
it is reused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATUS = Path("/proc/self/status")


@dataclass
class RealPeak:
    """Peak bytes over the baseline :meth:`start` takes; 0 where the platform cannot tell."""

    device: Any
    base: int = 0

    def start(self) -> None:
        """Reset the peak and remember what is held now."""
        if self._accelerator():
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            _trim()  # first: the peak mark is reset at what is held after the trim
            if _resettable():
                self.base = _status("VmRSS")

    def read(self) -> dict[str, int]:
        """``allocated``: the peak over the baseline; ``reserved``: with the allocator's cache
        (CUDA; on a CPU the resident set already includes what malloc keeps)."""
        if self._accelerator():
            import torch

            allocated = torch.cuda.max_memory_allocated(self.device) - self.base
            reserved = torch.cuda.max_memory_reserved(self.device) - self.base
            return {"allocated": allocated, "reserved": reserved}
        if not self.base:
            return {"allocated": 0, "reserved": 0}
        peak = _status("VmHWM") - self.base
        return {"allocated": peak, "reserved": peak}

    def _accelerator(self) -> bool:
        return getattr(self.device, "type", "cpu") == "cuda"


def _resettable() -> bool:
    """Reset the kernel's peak-RSS mark of this process; False where that is not permitted."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _trim() -> None:
    """Collect unreachable objects, then return freed heap memory to the system (glibc only;
    elsewhere nothing to do)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def _status(field: str) -> int:
    """A ``/proc/self/status`` memory figure, in bytes."""
    found = re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0
