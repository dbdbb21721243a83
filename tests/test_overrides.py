"""Typos on the command line: every unknown key, group or option gets one ``xirang error:``
line with the close names, before anything starts (never Hydra's "not in struct, use +key")."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import QUICK, run_dirs
from xirang_core.config import check_overrides
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["trainer.max_step=5"],
            "trainer.max_step: no such setting. Did you mean trainer.max_steps",
        ),
        (["optim.lrr=1"], "optim.lrr: no such setting. Did you mean optim.lr?"),
        (["trainer.lr=1"], "Did you mean optim.lr?"),
        (
            ["+trainr.max_steps=5"],
            "no such config group or section 'trainr'. Did you mean trainer?",
        ),
        (["+foo=1"], "+foo: no such config group or section. Valid: checkpoint, comm"),
        (
            ["model=gpt_tiny", "model.bogus=1"],
            "model.bogus: no such setting. Valid keys of model: family",
        ),
        (
            ["model=gpt_tiny", "+model.n_layr=1"],
            "model.n_layr: no such setting. Did you mean n_layer?",
        ),
        (["modle=gpt_tiny"], "modle: no such config group or section. Did you mean model?"),
        (["model=gpt_tiy"], "model=gpt_tiy: no such option. Did you mean gpt_tiny?"),
        (["parallel=fsdp", "parallel.zer=2"], "Did you mean parallel.zero?"),
        (["~trainer.nprocs"], "~trainer.nprocs: no such setting. Did you mean trainer.nproc?"),
        (["+trainer.max_steps=3"], "trainer.max_steps is already set; override it with"),
        (["hydra.run.dirr=x"], "Did you mean hydra.run.dir?"),
        (["-m", "model=gpt_tiny,gpt_small", "model.n_layr=2"], "Did you mean model.n_layer?"),
    ],
)
def test_a_typo_gets_one_line_with_suggestions(tmp_path, args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xirang", *args, *QUICK],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode != 0
    stderr = " ".join(result.stderr.split())
    assert stderr.startswith("xirang error:") and message in stderr, stderr
    assert "not in struct" not in stderr and "Traceback" not in stderr
    assert run_dirs(tmp_path) == []  # refused before a run directory or worker exists


def test_correct_keys_and_sweeps_pass_the_check() -> None:
    check_overrides(
        [
            "-m",
            "optim.lr=1e-3,3e-3",
            "parallel=fsdp",
            "parallel.zero=2",
            "+hydra.job.env_set.OMP=1",
        ],
        get_registry(),
    )


LONG_KEYS = ["trainer.max_steps", "trainer.global_batch", "optim.warmup_steps", "data.seq_len"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(LONG_KEYS), data=st.data())
def test_a_dropped_letter_is_suggested_back(key: str, data: st.DataObject) -> None:
    """Whatever letter of a setting's name is lost, the message offers the setting."""
    section, name = key.split(".")
    at = data.draw(st.integers(0, len(name) - 1))
    typo = f"{section}.{name[:at]}{name[at + 1 :]}=1"
    with pytest.raises(ConfigError, match="Did you mean") as caught:
        check_overrides([typo], get_registry())
    assert key in str(caught.value).split("Did you mean", 1)[1].split("?")[0]
