"""The validation loss does not depend on the worker count (every worker scores its stride of
the same held-out rows), and the final one reaches the tracker: read back from TensorBoard's
event files with its own reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, run_dirs
from tests.tracking.readers import tensorboard_scalars

pytestmark = pytest.mark.slow

STEPS = 2
RUN = (
    *ONE_LAYER_GPT,
    "parallel=ddp",
    f"trainer.max_steps={STEPS}",
    "trainer.sample_tokens=0",
    "tracker=[tensorboard]",
)


def test_validation_loss_is_the_same_on_one_and_two_workers(run_xirang, tmp_path: Path) -> None:
    figures = {}
    for nproc in (1, 2):
        done = run_xirang(*RUN, f"trainer.nproc={nproc}", f"hydra.run.dir=run-{nproc}")
        assert done.returncode == 0, done.stderr[-3000:]
        [run_dir] = [d for d in run_dirs(tmp_path) if d.name == f"run-{nproc}"]
        summary = json.loads((run_dir / "summary.json").read_text())
        # DDP trains the same weights on 1 and 2 workers (tests/parallel holds it to 1e-4)
        final = tensorboard_scalars(run_dir / "tensorboard", "val_loss")
        assert final == [(STEPS, pytest.approx(summary["val_loss"], abs=1e-5))]
        figures[nproc] = (summary["final_loss"], summary["val_loss"])
    (train_1, val_1), (train_2, val_2) = figures[1], figures[2]
    assert train_1 == pytest.approx(train_2, rel=1e-4)
    assert val_1 == pytest.approx(val_2, rel=1e-4)
