"""A training run imports nothing of the pool service (DESIGN.md: a run prices itself through
its cost policy; the service meters pool jobs), not even through the price book's metering hook
that every run calls at its end, nor with the experiment trackers on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, run_dirs
from tests.modules_recorder import MODULES_FILE
from xirang_service.cost.store import CostStore

REPO = Path(__file__).resolve().parents[1]
RECORDER = {"XIRANG_PLUGINS": "tests.modules_recorder", "PYTHONPATH": str(REPO)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "options", [(), ("tracker=[tensorboard,mlflow,wandb]",)], ids=["default", "trackers"]
)
def test_a_training_run_imports_no_service_module(
    options: tuple[str, ...], run_xirang, tmp_path: Path
) -> None:
    result = run_xirang(
        *ONE_LAYER_GPT, "trainer.max_steps=2", "trainer.sample_tokens=0", *options, env=RECORDER
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    modules = json.loads((run / MODULES_FILE).read_text())
    assert "xirang_pricebook.observer" in modules  # the metering hook ran in this worker
    assert [m for m in modules if m.split(".")[0] == "xirang_service"] == []
    store = CostStore()  # and the run is still charged, once the store opens
    [charge] = [c for c in store.charges() if Path(c.ref).resolve() == run.resolve()]
    assert charge.source == "run" and charge.tokens > 0
