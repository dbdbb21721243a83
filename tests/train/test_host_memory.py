"""A CPU worker keeps freed heap memory: a step's activations reuse pages, without faults."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

#: eight forward/backward steps of an MLP with 32 MiB activations (above glibc's largest mmap
#: threshold); prints the minor page faults of the last four
STEPS = """
import resource, sys, torch
from xirang_core.train.host_memory import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory()
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 256))
x = torch.randn(4096, 256)
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    model(x).square().mean().backward()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[4:]))
"""

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)


def late_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", STEPS, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


@glibc
def test_steps_reuse_freed_memory_without_page_faults() -> None:
    """By default every step faults its activations' pages in again (~33,000 a step here);
    retained, later steps find them resident."""
    default, retained = late_faults("default"), late_faults("retain")
    assert default > 4 * 20_000
    assert retained < default / 4
