"""A release users install (docs/releasing.md): the wheel built from this tree, installed as a
user installs it (not editable, into a fresh virtual environment that sees no other site
packages), lists every built-in plugin and trains from a folder outside the source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def built_wheel(out: Path) -> Path:
    """``python -m build`` of this tree: the sdist, then the wheel built from the unpacked
    sdist, as .ci/run builds them (so a file the sdist leaves out is missing from the wheel);
    the build backend comes from this environment (the dev extra), not a download."""
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), REPO],
        check=True,
        capture_output=True,
        text=True,
    )
    [wheel] = out.glob("xirang-*.whl")
    return wheel


#: the files a package reads at run time (a Dockerfile is for ``docker build`` in a checkout)
SHIPPED = (".py", ".yaml", ".json", ".txt", ".csv", ".html")


def shipped_files() -> set[str]:
    """What a wheel must carry, as paths inside it: every module and data file of the SDK, the
    kernel, the service, conf/ (the package ``xirang_conf``) and each plugin under plugins/
    (its own package, with its config folder)."""
    folders = {REPO / "conf": "xirang_conf"}
    folders |= {REPO / name: name for name in ("xirang", "xirang_core", "xirang_service")}
    folders |= {package: package.name for package in (REPO / "plugins").glob("xirang_*/")}
    return {
        f"{name}/{path.relative_to(folder)}"
        for folder, name in folders.items()
        for path in folder.rglob("*")
        if path.suffix in SHIPPED and "__pycache__" not in path.parts
    }


def venv_with(wheel: Path, home: Path) -> Path:
    """A fresh virtual environment (no system site packages) with the wheel and torch."""
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    python = home / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel), "torch==2.13.0"],
        check=True,
        capture_output=True,
        text=True,
    )
    return python


@pytest.mark.slow
def test_the_built_wheel_installs_into_a_fresh_venv_and_trains(tmp_path: Path) -> None:
    wheel = built_wheel(tmp_path / "dist")
    assert wheel.name.startswith(f"xirang-{PROJECT['version']}-")
    missing = shipped_files() - set(zipfile.ZipFile(wheel).namelist())
    assert sorted(missing) == []

    python = venv_with(wheel, tmp_path / "venv")
    work = tmp_path / "work"  # outside the source tree: nothing of it on sys.path
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"XIRANG_HOME": str(tmp_path / "home"), "XIRANG_STRICT_PLUGINS": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    where = run(str(python), "-c", "import xirang_core; print(xirang_core.__file__)").stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "venv")  # the wheel's, not the tree's
    xirang = str(python.parent / "xirang")
    assert run(xirang, "--version").stdout == f"xirang {PROJECT['version']}\n"
    listed = json.loads(run(xirang, "plugins", "--json").stdout)
    entry_points = PROJECT["entry-points"]["xirang"]
    assert {row["plugin"] for row in listed} >= set(entry_points)
    assert all(row["status"] == "loaded" for row in listed), listed

    run(str(python), "-m", "xirang", "trainer.max_steps=2")
    [summary] = (work / "outputs").rglob("summary.json")
    assert json.loads(summary.read_text())["steps"] == 2
