"""At 80 columns the plugin listing and the sweep table fit: they wrap, never truncate."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ONE_LAYER_GPT, QUICK

NARROW = {"COLUMNS": "80"}


def fits(text: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in text.splitlines()) and "…" not in text


def test_the_plugin_listing_fits_80_columns() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "xirang", "plugins"],
        capture_output=True,
        text=True,
        env={**os.environ, **NARROW},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert fits(done.stdout), done.stdout
    words = set(done.stdout.split())
    for name in ("hierarchical", "colossalai", "kubernetes", "accelerate"):
        assert name in words  # names whole, never cut


@pytest.mark.slow
def test_the_sweep_table_fits_80_columns(run_xirang) -> None:
    done = run_xirang("-m", "optim.lr=1e-3,3e-3", *ONE_LAYER_GPT, *QUICK, env=NARROW)
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout.split("sweep results (best first)", 1)[1]
    assert fits(table.split("every job's figures", 1)[0]), table
    assert "optim.lr=0.001" in table and "optim.lr=0.003" in table
    assert "sweep_results.csv" in table  # where the run directories went
