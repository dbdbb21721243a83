"""A CPU worker keeps the memory it frees, so training steps stop paying page faults.

PyTorch's CPU allocator is ``malloc``. glibc serves blocks above its mmap threshold (128 KiB,
rising to at most 32 MiB) with fresh ``mmap`` pages and hands the top of its heap back to the
kernel on ``free`` beyond a trim threshold. A training step allocates and frees every
activation, so each step faults in (and the kernel zeroes) its activations' pages anew: about
240,000 minor faults (~1 GB) per step of the 29M-parameter Llama at batch 8 x 512, 10-12% of
the step (measured; ``benchmarks/llm_throughput.py``). Turning ``mmap`` off for the heap and
never trimming it keeps the pages: later steps reuse them with no faults at all. The
process's peak resident set is what the steps needed anyway; only its fall after a peak is
given up. Elsewhere than glibc (macOS, musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

#: mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
#: heap growth per ``brk`` call beyond the request: fewer calls while the first step grows it
TOP_PAD = 64 << 20
#: the largest trim threshold mallopt takes (an int): in effect never trim
NEVER = 2**31 - 1


@functools.cache
def retain_freed_memory() -> bool:
    """Keep freed host memory in this process's heap for reuse (once per process); True where
    glibc's ``mallopt`` took the settings."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return False
    settings = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, NEVER), (M_TOP_PAD, TOP_PAD))
    return all(libc.mallopt(param, value) == 1 for param, value in settings)
