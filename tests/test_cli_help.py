"""What a newcomer types first: a bare ``xirang`` and ``--help``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: the console script next to this interpreter (the one ``pip install`` put there)
XIRANG = str(Path(sys.executable).parent / "xirang")


def xirang(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XIRANG, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )


def commands() -> list[str]:
    listing = xirang("--commands").stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def test_a_bare_xirang_lists_the_commands_and_trains_nothing(tmp_path: Path) -> None:
    result = xirang(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "python -m xirang" in result.stdout  # where training is
    for name in ("plugins", "devices", "data", "pool"):
        assert f"  {name} " in result.stdout
    assert list(tmp_path.iterdir()) == []  # no outputs/, no run started


@pytest.mark.parametrize("command", ["plugins", "devices", "ckpt", "plan", "data", "pool", "bench"])
def test_help_shows_no_rest_markup(command: str) -> None:
    assert command in commands()
    result = xirang(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "``" not in result.stdout and f"xirang {command}" in result.stdout


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_release_pyproject_names(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One version: pyproject.toml's, as the installed metadata carries it (docs/releasing.md)."""
    import tomllib

    from xirang_core.cli import main

    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    release = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert main([flag]) == 0
    assert capsys.readouterr().out == f"xirang {release}\n"
