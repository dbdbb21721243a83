"""The suite runs under pytest-xdist (pyproject's ``-n logical --dist loadgroup``): each test file
stays on one worker, and the files on the shared Slurm cluster share one worker. Checked by a
real two-worker run of a small suite laid out like this one, with this suite's conftest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

RECORDING_TEST = """
import json, os

def _record(name):
    with open({log!r}, "a") as log:
        log.write(json.dumps([__file__, name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
"""


def _write_suite(root: Path, log: Path) -> list[str]:
    files = [
        "tests/plugins/xirang_slurm/test_jobs.py",
        "tests/docs/test_documented_commands.py",
        "tests/pool/test_alpha.py",
        "tests/pool/test_beta.py",
    ]
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tests = "".join(f"\ndef test_{i}():\n    _record({i})\n" for i in range(6))
        path.write_text(RECORDING_TEST.format(log=str(log)) + tests)
    return files


def test_a_file_stays_on_one_worker_and_the_slurm_files_share_one(tmp_path: Path) -> None:
    log = tmp_path / "ran.jsonl"
    files = _write_suite(tmp_path / "suite", log)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "tests.conftest",
         "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path / "suite"), *files],
        cwd=tmp_path / "suite",
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 6 * len(files)
    workers: dict[str, set[str]] = {}
    for path, _, worker in rows:
        workers.setdefault(Path(path).relative_to(tmp_path / "suite").as_posix(), set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers[files[0]] == workers[files[1]]  # the Slurm files: one worker
    assert len(set().union(*workers.values())) == 2  # and the work was shared out
