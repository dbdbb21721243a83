"""``data.uri=ROOT`` without ``data=snapshot``: the run trains on ROOT and says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import QUICK, run_dirs
from tests.data.conftest import Make


@pytest.mark.slow
def test_a_uri_alone_trains_on_that_dataset_labelled_as_a_snapshot(
    run_xirang, tmp_path: Path, make_dataset: Make
) -> None:
    tier, snap = make_dataset(n=200, root=str(tmp_path / "corpus"))
    done = run_xirang(f"data.uri={tier.root}", "data.seq_len=16", "data.val_fraction=0.1", *QUICK)
    assert done.returncode == 0, done.stderr[-2000:]
    [run] = run_dirs(tmp_path)
    data = yaml.safe_load((run / "config.yaml").read_text())["data"]
    assert data["uri"] == tier.root and data["snapshot"] == snap.id
    assert data["name"] == "snapshot"  # not "stdlib", the embedded corpus it did not read
