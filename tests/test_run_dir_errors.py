"""A run directory that cannot be made is one ``xirang error:`` line naming it and what would
do, not the traceback of Hydra's ``mkdir``."""

from __future__ import annotations

import pytest

from tests.conftest import ONE_LAYER_GPT
from xirang_core.cli import main


def test_an_unwritable_hydra_run_dir_is_one_error_line(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    where = "/proc/xirang-run"  # /proc takes no new folder, even from root
    code = main([*ONE_LAYER_GPT, f"hydra.run.dir={where}", "trainer.max_steps=1"])
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0].startswith("xirang error: hydra.run.dir:") and where in lines[0], err
    assert "hydra.run.dir=outputs/my-run" in err
