"""``xirang pool simulate``: the policy plugins replayed over a trace, compared side by side."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
import yaml

from tests.test_narrow_terminal import fits
from xirang_service.pool import clusterfile
from xirang_service.pool.cli import main
from xirang_service.pool.sim import traces
from xirang_service.pool.sim.simulator import Simulator

PHILLY = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_jobs"


def _trace(path: Path, jobs: int = 300, seed: int = 1) -> Path:
    """A bursty synthetic trace: mostly short 1-card jobs behind some long wide ones."""
    rng = random.Random(seed)
    rows = ["arrival,duration,cards,project"]
    for i in range(jobs):
        wide = rng.random() < 0.1
        rows.append(
            f"{i * 30},{rng.choice((36000, 72000)) if wide else rng.randint(60, 1800)},"
            f"{rng.choice((8, 16)) if wide else 1},{rng.choice(('a', 'b'))}"
        )
    path.write_text("\n".join(rows) + "\n")
    return path


def _cluster(path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {"type": "v100", "nodes": 2, "devices": 8},
                    {"type": "k80", "nodes": 2, "devices": 8},
                ],
                "throughputs": {
                    "reference": "v100",
                    "speed": {"v100": 1.0, "k80": 0.5},
                    "classes": {"cnn": {"v100": 4.0, "k80": 1.0}},
                },
            }
        )
    )
    return path


def test_simulate_compares_policies_and_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "out"
    trace, cluster = _trace(tmp_path / "t.csv"), _cluster(tmp_path / "c.yaml")
    argv = [
        "simulate",
        "--trace",
        str(trace),
        "--cluster",
        str(cluster),
        "--policy",
        "fifo,priority,hetero",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert fits(printed.out) and "priority" in printed.out.split(), printed.out  # at 80 columns
    assert "replaying 300 jobs under hetero" in printed.err  # progress while it works
    rows = {r["policy"]: r for r in json.loads((out / "results.json").read_text())}
    assert set(rows) == {"fifo", "priority", "hetero"}
    assert all(r["finished"] == 300 for r in rows.values())
    assert rows["priority"]["avg_jct_h"] < rows["fifo"]["avg_jct_h"]  # backfill + LAS
    assert rows["fifo"]["preemptions"] == 0
    assert (out / "jct_cdf.png").stat().st_size > 0


def test_every_job_finishes_with_at_least_its_work(tmp_path: Path) -> None:
    data = clusterfile.read(_cluster(tmp_path / "c.yaml"))
    jobs = traces.load(_trace(tmp_path / "t.csv", jobs=120), ["cnn"], seed=3)
    result = Simulator(data, "priority").run(jobs)
    assert result.finished == len(jobs) and result.rejected == 0
    for index, job in enumerate(jobs, start=1):
        assert result.jct_by_job[index] >= job.duration * 0.5 - 1e-6  # k80s at most halve it


def test_bad_trace_columns_are_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("when,how_long\n1,2\n")
    from xirang_service.pool.errors import PoolError

    with pytest.raises(PoolError, match="neither Philly"):
        traces.load(bad, [])


@pytest.mark.skipif(not (PHILLY / "philly.csv").exists(), reason="shared traces not present")
def test_philly_trace_loads_sorted_from_zero() -> None:
    jobs = traces.load(PHILLY / "philly.csv", ["a", "b"], limit=2000)
    assert jobs[0].arrival == 0 and all(a.arrival <= b.arrival for a, b in itertools.pairwise(jobs))
    assert {j.job_class for j in jobs} == {"a", "b"}


def test_without_fifo_the_table_compares_with_the_first_policy_unmixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--policy priority --mixing off,balanced``: the last column reads as mixing's gain
    over the same policy without it, not as a ratio to a FIFO that was not replayed."""
    monkeypatch.setenv("COLUMNS", "120")
    trace, cluster = _trace(tmp_path / "t.csv", jobs=120), _cluster(tmp_path / "c.yaml")
    argv = ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy", "priority"]
    out = tmp_path / "out"
    assert main([*argv, "--mixing", "off,balanced", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = {r["mixing"]: r for r in json.loads((out / "results.json").read_text())}
    gain = rows["off"]["avg_jct_h"] / rows["balanced"]["avg_jct_h"]
    assert "JCT vs priority" in printed and "nan" not in printed, printed
    [mixed] = [line for line in printed.splitlines() if "priority mix balanced" in line]
    assert mixed.split()[-2] == f"{gain:.2f}x", printed


def test_load_divides_the_inter_arrival_times(tmp_path: Path) -> None:
    """Load 2 brings the same jobs, of the same sizes and lengths, in half the time."""
    path = _trace(tmp_path / "t.csv", jobs=50)
    recorded, doubled = traces.load(path, ["cnn"]), traces.load(path, ["cnn"], load=2.0)
    assert [j.arrival / 2 for j in recorded] == [j.arrival for j in doubled]
    assert [(j.duration, j.cards, j.job_class) for j in recorded] == [
        (j.duration, j.cards, j.job_class) for j in doubled
    ]


def test_simulate_over_loads_plots_mean_jct_against_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    trace, cluster = _trace(tmp_path / "t.csv", jobs=120), _cluster(tmp_path / "c.yaml")
    out, plot = tmp_path / "out", tmp_path / "jct_load.png"
    argv = ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy", "priority"]
    argv += ["--mixing", "off,balanced", "--load", "0.5,2", "--plot", str(plot), "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr()
    rows = json.loads((out / "results.json").read_text())
    assert [(r["load"], r["mixing"]) for r in rows] == [
        (0.5, "off"),
        (0.5, "balanced"),
        (2.0, "off"),
        (2.0, "balanced"),
    ]
    by = {(r["load"], r["mixing"]): r["avg_jct_h"] for r in rows}
    assert by[(2.0, "off")] > by[(0.5, "off")]  # the same jobs wait longer in a busier pool
    assert "load 2x" in printed.err and "on the trace at 0.5x its load" in printed.out, printed.out
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("load", ["0", "-1", "fast", ""])
def test_a_load_that_is_not_a_positive_factor_is_a_clear_error(tmp_path: Path, load: str) -> None:
    from xirang_service.pool.errors import PoolError

    trace, cluster = _trace(tmp_path / "t.csv", jobs=5), _cluster(tmp_path / "c.yaml")
    argv = ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--load", load]
    with pytest.raises(PoolError, match=r"--load .*positive factors"):
        main(argv)


def test_mixing_modes_are_compared_over_the_same_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 24-card job fits no single type of 16 devices: ``off`` refuses it and mixing runs
    it, so it leaves every replay instead of weighing on one mode's mean only."""
    trace = _trace(tmp_path / "t.csv", jobs=60)
    with trace.open("a") as rows:
        rows.write("100,36000,24,a\n")
    out = tmp_path / "out"
    argv = ["simulate", "--trace", str(trace), "--cluster", str(_cluster(tmp_path / "c.yaml"))]
    assert main([*argv, "--policy", "priority", "--mixing", "off,balanced", "--out", str(out)]) == 0
    assert "1 jobs need more devices than one type has" in capsys.readouterr().err
    rows = json.loads((out / "results.json").read_text())
    assert [(r["jobs"], r["finished"], r["rejected"]) for r in rows] == [(60, 60, 0)] * 2


def test_a_balanced_mixed_job_runs_at_the_measured_balance_efficiency(tmp_path: Path) -> None:
    """A 24-card job over 16 v100 (1 card each) and 16 k80 (half a card) runs at 0.95 of
    the 24 cards its devices sum to: what a balanced run measures (benchmarks/hetero.py)."""
    data = clusterfile.read(_cluster(tmp_path / "c.yaml"))
    job = traces.TraceJob(arrival=0.0, duration=3600.0, cards=24, project="a")
    result = Simulator(data, "priority", mixing="balanced").run([job])
    assert result.jct_by_job[1] == pytest.approx(3600.0 / 0.95)
