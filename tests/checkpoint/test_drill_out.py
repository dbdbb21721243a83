"""``xirang drill`` keeps its runs under XIRANG_HOME, not in whatever folder it was typed in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from xirang_ckpt.drill import main

from xirang_core.errors import ConfigError


def test_drill_runs_go_under_xirang_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="undisturbed run failed"):
        main(["kill", "trainer.max_step=3"])  # a typo: the first run stops before training
    said = capsys.readouterr().out
    where = Path(said.split("drill: runs go to ", 1)[1].split()[0])
    assert "drill: 1/2 the undisturbed run" in said  # progress before each run
    assert where.is_relative_to(Path(os.environ["XIRANG_HOME"]) / "drills"), said
    assert not (tmp_path / "drills").exists()
