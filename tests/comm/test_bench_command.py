"""``xirang bench comm`` end to end on 1 and 2 gloo workers: tables, plot, predictions."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from tests.test_narrow_terminal import fits

pytestmark = pytest.mark.slow


def test_bench_comm_writes_tables_plot_and_predictions(tmp_path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes: 2\ndevices_per_node: 4\nintra: {latency_us: 5, bandwidth_gbps: 100}\n"
        "inter: {latency_us: 30, bandwidth_gbps: 10}\n"
    )
    out = tmp_path / "bench"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xirang",
            "bench",
            "comm",
            "--workers",
            "1,2",
            "--options",
            "gloo,powersgd",
            "--steps",
            "6",
            "--reps",
            "1",
            "--sizes",
            "4096,262144",
            "--cluster",
            str(cluster),
            "--predict-workers",
            "4,8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    wide = [line for line in done.stdout.splitlines() if not fits(line)]
    assert not wide, wide  # every table whole at 80 columns
    assert "bench comm: training 6 steps with powersgd on 2 workers" in done.stderr  # progress
    for name in (
        "report.md",
        "collectives.csv",
        "scaling.csv",
        "predictions.csv",
        "results.json",
        "bench_comm.png",
    ):
        assert (out / name).stat().st_size > 0, name
    scaling = list(csv.DictReader((out / "scaling.csv").open()))
    assert [(r["option"], r["world"]) for r in scaling] == [
        ("single", "1"),
        ("gloo", "2"),
        ("powersgd", "2"),
    ]
    plain, powersgd = (float(r["wire_bytes_per_step"]) for r in scaling[1:])
    assert 0 < powersgd < plain / 4
    collectives = list(csv.DictReader((out / "collectives.csv").open()))
    assert {r["op"] for r in collectives} == {"all_reduce", "reduce_scatter", "all_gather"}
    predictions = list(csv.DictReader((out / "predictions.csv").open()))
    at_eight = [r for r in predictions if r["world"] == "8" and r["op"] == "all_reduce"]
    assert at_eight and all(r["bottleneck"] == "all_reduce@inter" for r in at_eight)


def test_bench_needs_a_known_benchmark() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "xirang", "bench", "disk"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "is one of ('comm',)" in done.stderr
