"""A separately installed third-party plugin is listed and selectable by a Hydra override."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import QUICK, run_dirs

EXAMPLE = Path(__file__).parents[1] / "examples" / "xirang-energy-cost"


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The example installed with pip into a folder of its own, visible through PYTHONPATH."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        check=True,
    )
    return {**os.environ, "PYTHONPATH": str(target), "COLUMNS": "200"}


def test_installed_plugin_is_listed(plugin_env):
    out = subprocess.run(
        [sys.executable, "-m", "xirang", "plugins", "--json"],
        env=plugin_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = next(r for r in json.loads(out) if r["plugin"] == "energy_cost")
    assert row["distribution"] == "xirang-energy-cost" and row["version"] == "0.1.0"
    assert [(s["kind"], s["name"], s["available"]) for s in row["registers"]] == [
        ("cost", "energy", True)
    ]


@pytest.mark.slow
def test_override_selects_the_plugin_option(plugin_env, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "xirang", "cost=energy", "cost.price_per_kwh=0.5", *QUICK],
        env=plugin_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    expected = 150 / 1000 * summary["wall_time_s"] / 3600 * 0.5
    assert summary["cost"]["policy"] == "energy"
    assert summary["cost"]["amount"] == pytest.approx(expected, rel=0.05)
