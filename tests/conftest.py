"""Shared fixtures: an isolated XIRANG_HOME, and running the real command line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

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


@pytest.fixture
def run_xirang(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m xirang ARGS`` in a fresh working folder; outputs land under it."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 1200):
        return subprocess.run(
            [sys.executable, "-m", "xirang", *args],
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def xirang_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m xirang ARGS`` (a subcommand, e.g. ``ckpt export``) in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "xirang", *args], cwd=cwd, capture_output=True, text=True
    )


def run_dirs(root: Path) -> list[Path]:
    """Run directories (those holding a config.yaml) under ``root``, oldest first."""
    return sorted(p.parent for p in root.rglob("config.yaml") if p.parent.name != ".hydra")
