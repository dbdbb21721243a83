"""The real single-node Slurm (.ci/services/slurm.sh starts it) the Slurm tests submit to.

Without Slurm these tests skip locally and FAIL in CI (CI=true), where the service must run.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


@pytest.fixture(scope="session")
def slurm() -> str:
    """The name of the Slurm node this machine runs, once slurmctld answers."""
    problem = ""
    if shutil.which("sbatch") is None:
        problem = "Slurm is not installed (run .ci/services/slurm.sh)"
    else:
        probe = subprocess.run(["sinfo", "-h", "-o", "%n %T"], capture_output=True, text=True)
        if probe.returncode != 0 or not probe.stdout.strip():
            problem = f"slurmctld does not answer: {probe.stderr.strip()}"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return probe.stdout.split()[0]
