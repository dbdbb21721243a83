"""Tools from PyPI that tests drive as their users run them (torchtitan, lm-eval), each
installed once into a folder of its own beside the test venv's torch and libraries.

``pip install --target`` with ``--no-deps`` puts the tool and what it imports that the test
venv lacks (each caller lists them, pinned) under ``XIRANG_TEST_CACHE`` (default
``~/.cache/xirang/test-installs``), built once per machine or CI run. The tool then runs on
the test venv's own torch, transformers and datasets: ``PYTHONPATH=<folder>``, and its
command-line scripts are in ``<folder>/bin``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path


def install_dir(tool: str) -> Path:
    """Where ``tool`` (a pinned requirement, ``name==version``) is installed."""
    root = os.environ.get("XIRANG_TEST_CACHE") or Path.home() / ".cache/xirang/test-installs"
    return Path(root) / tool.replace("==", "-")


def install(tool: str, *needs: str, package: str) -> Path:
    """The folder ``tool`` and ``needs`` are installed in, built on first use (under a lock,
    so parallel test workers build it once); ``package`` is the tool's import name, whose
    folder there says the install finished."""
    folder = install_dir(tool)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / package).is_dir():
            building = folder.with_name(f"{folder.name}.building")
            shutil.rmtree(building, ignore_errors=True)
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
            subprocess.run([*pip, str(building), tool, *needs], check=True)
            building.rename(folder)
    return folder
