"""Every ``parallel=`` and ``comm=`` option the docs say runs on the CPU (docs/parallel.md's
strategy table, docs/comm.md's options), composed from the command line as a user types it
(``python -m xirang parallel=... comm=...``) and trained for two steps on two CPU workers.
Tests that build a strategy's config in Python miss what only the command line composes (the
kernel's checks of the whole config: ``parallel=accelerate`` once died there)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, Prepared, run_dirs, run_in

#: two steps, no sample, one evaluation batch: the shortest run that trains and reports
TINY = ("trainer.max_steps=2", "trainer.sample_tokens=0", "trainer.eval_batches=1")

HAVE_COLOSSAL = importlib.util.find_spec("colossalai") is not None

#: docs/parallel.md's strategies on the CPU that no documented command names, each with the
#: workers it needs (ddp, fsdp, tp, sp, pp, hybrid and auto: the docs' own commands train them,
#: tests/docs/test_documented_runs.py)
PARALLEL = {
    "single": ("parallel=single", "trainer.nproc=1"),
    "accelerate": ("parallel=accelerate", "trainer.nproc=2"),
    "colossalai": ("parallel=colossalai", "parallel.plugin=torch_ddp", "trainer.nproc=2"),
}

#: docs/comm.md's options on the CPU (nccl, rccl and hccl serve accelerators only), under the
#: data parallel they hook into (powersgd: README.md's command trains it)
COMM = ("auto", "gloo", "fp16", "bf16", "topk", "hierarchical", "mixed", "localsgd", "diloco")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, prepared_home: Prepared) -> Path:
    """One prepared XIRANG_HOME (data snapshot, calibration) every run of this file shares."""
    home = tmp_path_factory.mktemp("choices-home")
    prepared_home.seed(home)
    return home


def train(folder: Path, home: Path, *args: str) -> dict[str, object]:
    """``python -m xirang ARGS`` on the one-layer GPT for two steps; its summary."""
    given = {arg.partition("=")[0] for arg in args}
    model = [arg for arg in ONE_LAYER_GPT if arg.partition("=")[0] not in given]
    done = run_in(folder, *model, *TINY, *args, env={"XIRANG_HOME": str(home)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    [run_dir] = run_dirs(folder)
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("choice", PARALLEL)
def test_each_parallel_choice_trains_from_the_command_line(
    choice: str, tmp_path: Path, home: Path
) -> None:
    if choice == "colossalai" and not HAVE_COLOSSAL:
        pytest.skip("needs colossalai==0.5.0 installed as docs/parallel.md says (not in CI)")
    args = PARALLEL[choice]
    summary = train(tmp_path, home, *args)
    assert summary["steps"] == 2
    assert summary["world_size"] == (1 if choice == "single" else 2)
    assert summary["final_loss"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("choice", COMM)
def test_each_comm_choice_trains_from_the_command_line(
    choice: str, tmp_path: Path, home: Path
) -> None:
    summary = train(tmp_path, home, "parallel=ddp", "trainer.nproc=2", f"comm={choice}")
    assert summary["steps"] == 2 and summary["world_size"] == 2
    assert summary["final_loss"] > 0
