"""Acceptance: a 2-worker run killed three times finishes with the uninterrupted weights; a
corrupted newest checkpoint is skipped with its reason. Runs the real command line."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from xirang_ckpt.drill import run_drill, same_weights, train_run, with_defaults

from tests.conftest import ONE_LAYER_GPT
from xirang_core.checkpoint.events import read_events

pytestmark = pytest.mark.slow

SMALL = [*ONE_LAYER_GPT, "trainer.max_steps=16"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    overrides = with_defaults(SMALL)
    run = tmp_path_factory.mktemp("drills") / "baseline"
    train_run(run, overrides, [])
    return run, overrides


def test_three_kills_finish_bitwise_identical(baseline: tuple[Path, dict[str, str]]) -> None:
    run, overrides = baseline
    report = run_drill("kill", run.parent / "kill", run, overrides, random.Random(1), 3)
    assert report.recovered, report.detail
    kills = [e for e in read_events(run.parent / "kill") if e["event"] == "kill"]
    assert len(kills) == 3
    assert report.identical
    assert same_weights(run, run.parent / "kill")


def test_corrupt_newest_checkpoint_resumes_from_the_previous(
    baseline: tuple[Path, dict[str, str]],
) -> None:
    run, overrides = baseline
    report = run_drill("corrupt", run.parent / "corrupt", run, overrides, random.Random(0), 1)
    assert report.recovered, report.detail
    events = read_events(run.parent / "corrupt")
    damaged = next(e["checkpoint"] for e in events if e["event"] == "corrupt")
    skip = next(e for e in events if e["event"] == "skip")
    assert skip["step"] == damaged and "checksum" in skip["reason"]
    restore = next(e for e in events if e["event"] == "restore")
    assert restore["step"] < damaged
    assert report.identical
