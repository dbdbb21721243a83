"""Every example plugin's own test suite passes, run as its author runs it: ``pytest`` on its
``tests/`` folder, with xirang's test kit (the ``xirang`` fixture) and nothing installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted(p.parent for p in (Path(__file__).parents[1] / "examples").glob("*/tests"))


def test_the_examples_have_suites():
    assert {p.name for p in EXAMPLES} >= {"xirang-bigram", "xirang-energy-cost", "xirang-step-log"}


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_an_example_plugins_own_tests_pass(example: Path, tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(example / "tests")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout
