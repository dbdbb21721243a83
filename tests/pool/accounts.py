"""Login accounts of this machine made for a test or a benchmark (``useradd --create-home``, as
an operator makes a tenant's), removed afterwards with their Slurm jobs and homes."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def login_accounts(*prefixes: str) -> Iterator[list[str]]:
    """One new account per prefix (``PREFIX-<random>``), gone again on exit."""
    names = [f"{prefix}-{secrets.token_hex(3)}" for prefix in prefixes]
    for name in names:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    try:
        yield names
    finally:
        for name in names:
            subprocess.run(["scancel", "-u", name], capture_output=True)
            subprocess.run(["userdel", "--remove", name], capture_output=True)
