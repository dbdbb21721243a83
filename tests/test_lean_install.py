"""README's set-up for a user who trains is ``pip install -e . torch==2.13.0``: no extra. The
default run must then train with only xirang's core dependencies (and theirs). Here every
other installed distribution's modules are made unimportable, in the run and in the worker
processes it starts (a ``sitecustomize`` on PYTHONPATH), as if the lean install had left them
out; a core dependency the run needs that is only in an extra fails the run."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import ONE_LAYER_GPT, QUICK, Prepared, run_dirs

#: what every virtual environment holds before anything is installed into it
VENV = {"pip", "setuptools", "wheel"}

BLOCKER = '''
import importlib.machinery, json, os, sys

BLOCKED = frozenset(json.loads(os.environ["XIRANG_TEST_NOT_INSTALLED"]))


class LeanPathFinder(importlib.machinery.PathFinder):
    """The path finder, blind to the distributions the lean install does not have: their
    imports fail and importlib.util.find_spec says None, as if they were not installed."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [
    LeanPathFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path
]
'''


def _name(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def core_closure(extras: tuple[str, ...] = ()) -> set[str]:
    """xirang (with ``extras``) and every distribution its requirements pull in, transitively
    (other extras and requirements whose markers do not hold here left out)."""
    seen, names = set(), set(VENV)
    todo: list[tuple[str, tuple[str, ...]]] = [("xirang", extras)]
    while todo:
        name, wanted = todo.pop()
        name = _name(name)
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        names.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a dependency whose marker does not hold here is not installed either
        for text in requires:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in ("", *wanted)):
                todo.append((requirement.name, tuple(sorted(requirement.extras))))
    return names


def not_in_core(extras: tuple[str, ...] = ()) -> list[str]:
    """Top-level modules that only distributions outside the closure of xirang[extras]
    provide."""
    core = core_closure(extras)
    return sorted(
        module
        for module, owners in metadata.packages_distributions().items()
        if not any(_name(owner) in core for owner in owners)
    )


def lean_env(tmp_path: Path, home: Path, extras: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a run as if only xirang[extras] were installed (in it and in the
    workers it starts), with ``home`` as its XIRANG_HOME."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCKER)
    return {
        **os.environ,
        "XIRANG_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")])
        ),
        "XIRANG_TEST_NOT_INSTALLED": json.dumps(not_in_core(extras)),
        "XIRANG_STRICT_PLUGINS": "1",  # a plugin that cannot load without an extra fails
    }


def test_the_core_closure_is_what_pyproject_says(tmp_path: Path) -> None:
    """The check itself: torch and hydra are in; the dev stack and the extras are not."""
    blocked = set(not_in_core())
    assert {"torch", "hydra", "omegaconf", "tokenizers"}.isdisjoint(blocked)
    assert {"pytest", "fastapi", "transformers", "mlflow", "optuna"} <= blocked


@pytest.mark.slow
def test_the_default_run_trains_with_only_the_core_dependencies(
    tmp_path: Path, prepared_home: Prepared
) -> None:
    home = tmp_path / "home"
    prepared_home.seed(home)
    env = lean_env(tmp_path, home)
    done = subprocess.run(
        [sys.executable, "-m", "xirang", *QUICK],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    [run] = run_dirs(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_loss"] < summary["first_loss"]


@pytest.mark.slow
def test_the_documented_pruning_sweep_runs_with_only_the_optuna_extra(
    tmp_path: Path, prepared_home: Prepared
) -> None:
    """docs/tracking.md: ``pip install 'xirang[optuna]'``, then its pruning sweep (2 trials of 4
    steps here): Hydra finds the sweeper with no other Hydra plugin installed."""
    assert "hydra_plugins" in not_in_core(("optuna",))  # only hydra-submitit-launcher has it
    home = tmp_path / "home"
    prepared_home.seed(home)
    sweep = ("-m", "hydra/sweeper=optuna_pruning", "hydra.sweeper.n_trials=2", *ONE_LAYER_GPT)
    steps = ("trainer.max_steps=4", "trainer.eval_every=2", "trainer.eval_batches=1")
    rest = ("trainer.sample_tokens=0", "optim.warmup_steps=2")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xirang",
            *sweep,
            *steps,
            *rest,
            "optim.lr=tag(log, interval(1e-4, 1e-1))",
        ],
        cwd=tmp_path,
        env=lean_env(tmp_path, home, ("optuna",)),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    [study] = tmp_path.rglob("optuna-study.db")
    assert len(run_dirs(study.parent)) == 2
