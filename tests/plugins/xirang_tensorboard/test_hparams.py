"""TensorBoard's HParams view lists a run with its hyperparameters: the records the tracker
writes, read back with TensorBoard's own event reader and the hparams plugin's protobufs."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata
from xirang_tensorboard.tracker import TensorBoardTracker

CONFIG = {
    "trainer": {"max_steps": 6, "lr_scale": 0.5, "compile": False, "nproc": 2},
    "optim": {"name": "adamw", "lr": 3e-4, "betas": [0.9, 0.95]},
    "model": {"name": "gpt", "dropout": None},
}


def hparams_content(folder: Path) -> dict[str, bytes]:
    """The hparams plugin's records by tag, as TensorBoard's event reader finds them."""
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    return events.PluginTagToContent(metadata.PLUGIN_NAME)


def test_the_run_config_reaches_the_hparams_view(tmp_path: Path) -> None:
    tracker = TensorBoardTracker(flush_s=1)
    folder = Path(tracker.start(tmp_path, CONFIG, None))
    tracker.log(1, {"loss": 5.5, "val_loss": 5.6})
    tracker.finish({"steps": 1}, tmp_path)

    content = hparams_content(folder)
    start = metadata.parse_session_start_info_plugin_data(
        content[metadata.SESSION_START_INFO_TAG]
    ).hparams
    assert start["trainer.max_steps"].number_value == 6
    assert start["optim.lr"].number_value == pytest.approx(3e-4)
    assert start["optim.name"].string_value == "adamw"
    assert start["trainer.compile"].bool_value is False
    assert start["optim.betas"].string_value == "[0.9, 0.95]"
    assert start["model.dropout"].string_value == "null"
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    assert {h.name for h in experiment.hparam_infos} >= {"trainer.max_steps", "optim.lr"}
    shown = {m.name.tag for m in experiment.metric_infos}
    assert {"loss", "val_loss"} <= shown
