"""``xirang drill`` keeps its runs under XIRANG_HOME, not in whatever folder it was typed in."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest
from xirang_ckpt.drill import main

from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import build_registry


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


def test_a_drill_no_installed_plugin_injects_is_refused_at_compose() -> None:
    """Without the plugin that injects faults (``xirang_fault_injector``), a drill section is
    one error at compose, before any worker starts, not a drill whose faults never fire."""
    points = [p for p in metadata.entry_points(group="xirang") if p.value != "xirang_ckpt"]
    bare = build_registry(points)
    drill = ["+drill={corrupt: [2]}", "trainer.max_steps=3"]
    assert compose(drill)["drill"] == {"corrupt": [2]}  # with it installed: composes
    with pytest.raises(ConfigError, match="drill: no installed plugin injects faults"):
        compose(drill, bare)
