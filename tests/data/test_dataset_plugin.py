"""A dataset is a plugin kind: a third-party ``xirang_datasets`` hook adds a ``data=`` option
that the run prepares once at launch and trains on, through the kernel's step loader."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.data import counting_dataset
from xirang import ConfigError
from xirang.testing import Kit

PLUGIN = "tests.data.counting_dataset"


def test_a_third_party_dataset_is_selected_prepared_once_and_trained(xirang: Kit) -> None:
    xirang.use(PLUGIN)
    xirang.check("dataset", "counting")
    counting_dataset.PREPARED.clear()
    run = xirang.train("data=counting")
    assert counting_dataset.PREPARED == ["counting-64x24"]  # the launch prepared it once
    assert run.summary["data_snapshot"] == "counting-64x24"
    # 4 steps of 4 rows of 32 input tokens, every one from the plugin's only source
    assert run.summary["data_tokens"] == {"counting": 4 * 4 * 32}
    assert run.run_dir is not None
    config = yaml.safe_load((run.run_dir / "config.yaml").read_text())
    assert config["data"]["name"] == "counting"
    assert config["runtime"]["counting_tokens"] > 0  # pinned at launch, read by the worker
    assert max(m["step"] for m in run.metrics if "loss" in m) == 4


def test_two_workers_read_the_plugins_batches_from_the_runs_config(xirang: Kit) -> None:
    """Each worker is its own process: it finds the plugin and what the launch pinned only
    through the run's config.yaml, and reads its rank's half of every step."""
    xirang.use(PLUGIN, path=Path(__file__).parents[2])  # the workers import it from here
    run = xirang.train("data=counting", nproc=2)
    assert run.returncode == 0, run.output
    assert run.summary["data_snapshot"] == "counting-64x24"
    assert run.summary["data_tokens"] == {"counting": 4 * 4 * 32}


def test_an_unknown_dataset_names_the_installed_ones(xirang: Kit) -> None:
    xirang.use(PLUGIN)
    with pytest.raises(ConfigError) as error:
        xirang.compose("data.name=countng")
    message = str(error.value)
    assert "unknown dataset 'countng'" in message
    assert "counting, mixture, snapshot, stdlib" in message
