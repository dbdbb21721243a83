"""torchtitan 0.3.0 from PyPI, installed once beside the test venv's own torch
(:func:`tests.pypi.install`), and its driver (tests/checkpoint/titan_driver.py) run in a
subprocess.

Beside torchtitan go what its checkpoint, optimizer and Llama 3 modules import that the test
venv lacks (tyro, docstring_parser, spmd_types, and triton, which its MoE kernels import at
import time even on a CPU); it runs on the test venv's torch (2.13 CPU). Its own torch pin is
not taken.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.pypi import install

TORCHTITAN = "torchtitan==0.3.0"
#: what torchtitan imports that xirang's dev venv does not hold, pinned as its wheel asks
NEEDS = ("tyro==1.0.17", "docstring_parser==0.18.0", "spmd_types==0.2.3", "triton==3.9.0")
DRIVER = Path(__file__).with_name("titan_driver.py")


def run_driver(*args: str) -> subprocess.CompletedProcess[str]:
    """tests/checkpoint/titan_driver.py under torchtitan; fails with its output."""
    env = {**os.environ, "PYTHONPATH": str(install(TORCHTITAN, *NEEDS, package="torchtitan"))}
    done = subprocess.run(
        [sys.executable, str(DRIVER), *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done
