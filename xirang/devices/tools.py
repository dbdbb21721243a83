"""Run a vendor command-line tool without ever raising.

Device detection must not crash on a machine without the tool, with a hung driver, or with a tool
that prints an error and exits non-zero, so every call goes through :func:`run_tool`, which turns
each of those into a :class:`ToolOutput` saying what went wrong. Backends take a ``runner`` so
tests replay recorded outputs instead of calling the real tool.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: seconds a vendor tool may take; nvidia-smi on a box with a hung GPU can block for minutes
TOOL_TIMEOUT_S = 20.0
#: where this boot's kernel messages can be read, tried in order (dmesg may be restricted)
KERNEL_LOG_COMMANDS = (("dmesg", "--kernel", "--ctime"), ("journalctl", "-k", "-b", "--no-pager"))


@dataclass(frozen=True)
class ToolOutput:
    """What one tool call produced; ``error`` is empty when it ran and exited 0."""

    argv: tuple[str, ...]
    stdout: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


ToolRunner = Callable[[Sequence[str]], ToolOutput]


def run_tool(argv: Sequence[str], timeout: float = TOOL_TIMEOUT_S) -> ToolOutput:
    """Run ``argv``; a missing tool, a timeout or a non-zero exit become ``error``, not raises."""
    args = tuple(argv)
    if shutil.which(args[0]) is None:
        return ToolOutput(args, error=f"{args[0]} not found on PATH")
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ToolOutput(args, error=f"{' '.join(args)} did not answer within {timeout:.0f} s")
    except OSError as exc:
        return ToolOutput(args, error=f"{args[0]} could not run: {exc}")
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        reason = detail[-1] if detail else "no output"
        # the tool's own output still matters: nvidia-smi reports lost GPUs with exit code 15
        return ToolOutput(args, proc.stdout, f"{args[0]} exited {proc.returncode}: {reason}")
    return ToolOutput(args, proc.stdout)


def import_optional(module: str) -> object | None:
    """An optional vendor library, or None when it is absent or fails to import."""
    import importlib

    try:
        return importlib.import_module(module)
    except Exception:  # a vendor library may raise anything on import (missing .so, bad driver)
        return None


def kernel_log(run: ToolRunner) -> str:
    """This boot's kernel messages, where GPU drivers log faults; empty when unreadable."""
    for command in KERNEL_LOG_COMMANDS:
        result = run(command)
        if result.ok and result.stdout:
            return result.stdout
    return ""
