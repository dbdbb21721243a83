"""benchmarks/data_loading.py at a tiny size: xirang's training path and the mmap bound (the
peers need their own environment, built from the network, so here they are reported n/a)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RATIOS = (
    "warm_vs_streaming",
    "warm_vs_litdata",
    "cold_vs_streaming",
    "cold_vs_litdata",
    "resume_speedup_vs_streaming",
    "warm_vs_mmap",
)


@pytest.mark.slow
def test_every_side_reads_the_same_batches_and_the_last_line_has_every_ratio(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, "benchmarks/data_loading.py", "--tokens", "200000", "--runs", "1"]
    env = {**os.environ, "XIRANG_HOME": str(tmp_path)}
    done = subprocess.run(
        [*argv, "--peers", "none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    out = done.stdout
    assert "every side read the same tokens" in out  # xirang's epoch equals the mmap file's
    assert re.search(
        r"cold  xirang .* batches/s.*, 12 batches, \d+ files cached from the origin", out
    )
    assert re.search(r"resume at batch 6: xirang \d+ ms", out)
    assert "warm  streaming n/a (--peers none)" in out
    last = dict(item.split("=") for item in out.strip().splitlines()[-1].split())
    assert tuple(last) == RATIOS
    assert float(last["warm_vs_mmap"]) > 0
    assert {last[k] for k in RATIOS[:5]} == {"n/a"}
