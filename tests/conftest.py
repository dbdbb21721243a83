"""Shared fixtures: an isolated XIRANG_HOME, and running the real command line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

#: OpenMP threads that wait spin only briefly before sleeping. The suite runs on pytest-xdist
#: workers, so two torch processes often share the cores: with libgomp's default spin, each one's
#: threads burn the cores the other needs at every barrier (two 2-thread matmul loops on 2
#: cores: 13x slower than one; at 1,000 spins 2.4x, and one alone as fast as by default). Set
#: before torch loads here, and inherited by every run the tests start.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")

#: a fast configuration of the embedded run for tests that train end to end
QUICK = ("trainer.max_steps=6", "trainer.log_every=2", "trainer.sample_tokens=16")
#: a one-layer byte-level GPT on short windows: the smallest model a run trains end to end
ONE_LAYER_GPT = (
    "model=gpt_tiny",
    "tokenizer=bytes",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "data.seq_len=32",
    "trainer.global_batch=4",
)


#: test files that use the one Slurm cluster .ci/services starts (and the docs' Slurm commands):
#: their jobs would queue behind each other's on its two CPUs, past their waits, so they share
#: one worker
ON_SHARED_SLURM = ("tests/plugins/xirang_slurm/", "tests/docs/test_documented_commands.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n``, ``--dist loadgroup``, pyproject's default) a test file runs
    on one worker, in its order, as without xdist: module fixtures (a trained run, a service)
    are built once, and tests that follow each other in a file see what they expect. The
    Slurm files form one group."""
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = "slurm" if path.startswith(ON_SHARED_SLURM) else path
        item.add_marker(pytest.mark.xdist_group(group))


def require_moto_server() -> None:
    """S3 tests need moto_server: missing, they fail under CI=true (a service CI must have)
    and skip elsewhere."""
    import shutil

    if shutil.which("moto_server") is None:
        message = "moto_server not found: pip install 'moto[server]' (in xirang[dev])"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session", autouse=True)
def xirang_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test shares one cache folder of its own, never the user's ~/.cache/xirang."""
    home = tmp_path_factory.mktemp("xirang-home")
    os.environ["XIRANG_HOME"] = str(home)
    return home


@dataclass(frozen=True)
class Prepared:
    """What the default run prepares once per XIRANG_HOME, as folders and files of ``home``."""

    home: Path
    paths: tuple[Path, ...]

    def seed(self, home: Path) -> None:
        """Copies into a fresh XIRANG_HOME ``home``: the state the default run's first start
        would leave there, without the half minute it takes."""
        for found in self.paths:
            target = home / found.relative_to(self.home)
            target.parent.mkdir(parents=True, exist_ok=True)
            if found.is_dir():
                shutil.copytree(found, target)
            else:
                shutil.copy2(found, target)


@pytest.fixture(scope="session")
def prepared_home(xirang_home: Path) -> Prepared:
    """The session's home once it holds what the default run prepares: the stdlib snapshot
    (with its token shards), the BPE tokenizer learnt from it and this host's device
    calibration, prepared the way ``xirang_core.run.launch`` does before it trains. Tests that
    do not test preparing itself start from these instead of paying for them again."""
    from xirang_data.stdlib_corpus import ensure_prepared

    from xirang_core.config import compose
    from xirang_core.plugins import get_registry
    from xirang_core.run import prepare_data, resolve_runtime

    registry = get_registry()
    config = prepare_data(resolve_runtime(compose([], registry), registry), registry)
    tokenizer = Path(config["runtime"]["tokenizer"]["path"]).parent
    calibration = sorted(xirang_home.glob("calibration/cpu-*"))
    return Prepared(xirang_home, (ensure_prepared(), tokenizer, *calibration))


@pytest.fixture(scope="session")
def lr_sweep(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``-m optim.lr=1e-3,3e-3`` over the one-layer GPT at 80 columns, and the folder it ran
    in: one sweep for the tests of its table (what it holds, and that it fits a narrow
    terminal), rather than one sweep each."""
    folder = tmp_path_factory.mktemp("lr-sweep")
    done = subprocess.run(
        [sys.executable, "-m", "xirang", "-m", "optim.lr=1e-3,3e-3", *ONE_LAYER_GPT, *QUICK],
        cwd=folder,
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, folder


def run_in(
    folder: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    """``python -m xirang ARGS`` in ``folder`` at 200 columns; outputs land under it."""
    return subprocess.run(
        [sys.executable, "-m", "xirang", *args],
        cwd=folder,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def run_xirang(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m xirang ARGS`` in a fresh working folder; outputs land under it."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 1200):
        return run_in(tmp_path, *args, env=env, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def quick_default_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``python -m xirang`` with :data:`QUICK` (the embedded default for 6 steps) and its run
    directory: one run for the tests that read what it leaves (its data snapshot, its model,
    summary and sample), rather than one run each."""
    folder = tmp_path_factory.mktemp("quick-default")
    done = run_in(folder, *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = run_dirs(folder)
    return done, run_dir


def xirang_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m xirang ARGS`` (a subcommand, e.g. ``ckpt export``) in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "xirang", *args], cwd=cwd, capture_output=True, text=True
    )


def run_dirs(root: Path) -> list[Path]:
    """Run directories (those holding a config.yaml) under ``root``, oldest first."""
    return sorted(p.parent for p in root.rglob("config.yaml") if p.parent.name != ".hydra")
