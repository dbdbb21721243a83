"""torchtitan 0.3.0 from PyPI, installed once beside the test venv's own torch, and its
driver (tests/checkpoint/titan_driver.py) run in a subprocess.

``pip install --target`` with ``--no-deps`` puts torchtitan and what its checkpoint, optimizer
and Llama 3 modules import that the test venv lacks (tyro, docstring_parser, spmd_types, and
triton, which its MoE kernels import at import time even on a CPU) into a folder under
``XIRANG_TEST_CACHE`` (default ``~/.cache/xirang/test-installs``), built once per machine or
CI run; it runs on the test venv's torch (2.13 CPU). Its own torch pin is not taken.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

TORCHTITAN = "torchtitan==0.3.0"
#: what torchtitan imports that xirang's dev venv does not hold, pinned as its wheel asks
NEEDS = ("tyro==1.0.17", "docstring_parser==0.18.0", "spmd_types==0.2.3", "triton==3.9.0")
DRIVER = Path(__file__).with_name("titan_driver.py")


def install_dir() -> Path:
    root = os.environ.get("XIRANG_TEST_CACHE") or Path.home() / ".cache/xirang/test-installs"
    return Path(root) / TORCHTITAN.replace("==", "-")


def install() -> Path:
    """The folder torchtitan is installed in, built on first use (under a lock, so parallel
    test workers build it once)."""
    folder = install_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "torchtitan").is_dir():
            building = folder.with_name(f"{folder.name}.building")
            shutil.rmtree(building, ignore_errors=True)
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
            subprocess.run([*pip, str(building), TORCHTITAN, *NEEDS], check=True)
            building.rename(folder)
    return folder


def run_driver(*args: str) -> subprocess.CompletedProcess[str]:
    """tests/checkpoint/titan_driver.py under torchtitan; fails with its output."""
    env = {**os.environ, "PYTHONPATH": str(install())}
    done = subprocess.run(
        [sys.executable, str(DRIVER), *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done
