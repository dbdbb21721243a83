"""A run's config is composed once and validated once: ``@hydra.main`` alone composes it
twice (to learn the mode, then to run), and the typo check a third time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ONE_LAYER_GPT, run_dirs

#: ``xirang ARGS`` with Hydra's composition and xirang's validation counted, as they run
COUNTED_CLI = """
import atexit, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
import xirang_core.config as config
counts = {"compose": 0, "validate": 0}
def counted(name, call):
    def counting(*args, **kwargs):
        counts[name] += 1
        return call(*args, **kwargs)
    return counting
ConfigLoaderImpl.load_configuration = counted("compose", ConfigLoaderImpl.load_configuration)
config.validate = counted("validate", config.validate)
atexit.register(lambda: print("COUNTS", counts["compose"], counts["validate"]))
from xirang_core.cli import main
sys.exit(main(sys.argv[1:], bare_trains=True))
"""


def counted_run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", COUNTED_CLI, *args],
        cwd=folder,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_run_is_composed_once_and_validated_once(tmp_path):
    args = (*ONE_LAYER_GPT, "trainer.max_steps=2", "trainer.sample_tokens=4")
    result = counted_run(tmp_path, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COUNTS 1 1" in result.stdout
    # Hydra's job as @hydra.main makes it: its output folder and its record of the run
    [hydra_dir] = list(tmp_path.rglob(".hydra"))
    assert yaml.safe_load((hydra_dir / "overrides.yaml").read_text()) == list(args)
    hydra = yaml.safe_load((hydra_dir / "hydra.yaml").read_text())["hydra"]
    assert hydra["job"]["name"] == "cli" and hydra["mode"] == "RUN"
    [run_dir] = run_dirs(tmp_path)
    assert (run_dir / "summary.json").exists()


def test_a_typo_is_refused_before_anything_runs(tmp_path):
    result = counted_run(tmp_path, "trainer.max_step=2")
    assert result.returncode != 0
    assert "trainer.max_step: no such setting. Did you mean trainer.max_steps" in result.stderr
    assert not list(tmp_path.rglob(".hydra"))  # no output folder for a run that never started
