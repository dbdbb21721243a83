"""The observer through xirang's test kit (the ``xirang`` fixture)."""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1]


@pytest.fixture
def kit(xirang):
    xirang.use("xirang_step_log", path=PACKAGE)
    return xirang


def test_it_is_listed_with_the_hooks_it_implements(kit):
    record = kit.registry.plugins["xirang_step_log"]
    assert record.hooks == ["xirang_on_run_start", "xirang_on_step_end"]


def test_every_logged_step_is_one_csv_row_with_two_workers(kit):
    run = kit.train("trainer.max_steps=4", "trainer.log_every=2", nproc=2)
    assert run.returncode == 0, run.output[-2000:]
    rows = (run.run_dir / "steps.csv").read_text().splitlines()[2:]
    assert [int(r.split(",")[0]) for r in rows] == [m["step"] for m in run.metrics] == [1, 2, 4]
    assert [float(r.split(",")[2]) for r in rows] == [m["lr"] for m in run.metrics]
