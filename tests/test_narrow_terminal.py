"""At 80 columns the command and plugin listings, the plan and the sweep table fit: they
wrap, never truncate."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

NARROW = {"COLUMNS": "80"}


def narrow(*command: str) -> str:
    """What ``command`` prints at 80 columns (it must succeed)."""
    done = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        env={**os.environ, **NARROW},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def fits(text: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in text.splitlines()) and "…" not in text


def test_the_plugin_listing_fits_80_columns() -> None:
    out = narrow("-m", "xirang", "plugins")
    assert fits(out), out
    words = set(out.split())
    for name in ("hierarchical", "colossalai", "kubernetes", "accelerate"):
        assert name in words  # names whole, never cut


@pytest.mark.slow
def test_the_sweep_table_fits_80_columns(lr_sweep) -> None:
    table = lr_sweep[0].stdout.split("sweep results (best first)", 1)[1]
    assert fits(table.split("every job's figures", 1)[0]), table
    assert "optim.lr=0.001" in table and "optim.lr=0.003" in table
    assert "sweep_results.csv" in table  # where the run directories went


@pytest.mark.parametrize("command", [[], ["plan"], ["data"], ["pool"], ["bench", "comm"]])
def test_help_and_every_synopsis_fit_80_columns(command: list[str]) -> None:
    """``python -m xirang --help`` (Hydra's template, the config groups wrapped) and the
    subcommands' synopses, down to the composed config (its values are the user's own)."""
    out = narrow("-m", "xirang", *command, "--help").split("== Config ==")[0]
    assert fits(out), out
    if not command:  # every group still listed, each option whole
        assert "model: gpt_125m," in out and "llama_tiny" in out.split()


def test_the_command_listing_fits_80_columns() -> None:
    out = narrow("-c", "import sys; from xirang_core.cli import main; sys.exit(main([]))")
    assert fits(out), out
    words = " ".join(out.split())  # a long description wraps, whole
    assert "inventory, topology, health and calibration of this machine's devices" in words


def test_the_plan_table_fits_80_columns(capsys, monkeypatch) -> None:
    from xirang_planner.command import main

    monkeypatch.setenv("COLUMNS", "80")
    plan = ["model=llama3_70b", "cluster=dgx_h100", "nodes=8", "seq=128", "--top", "3"]
    assert main(plan) == 0
    printed = capsys.readouterr().out
    assert fits(printed), printed
    assert "dp1xtp4xpp16" in printed and "20.88" in printed  # the plan and its memory, whole


def test_the_sweep_table_splits_no_value_at_80_columns(tmp_path, capsys, monkeypatch) -> None:
    """Issue 53: at 80 columns a figure or an override was split over two lines. Every value
    stays whole (overrides wrap between overrides); what does not fit is left to the CSV."""
    from xirang_core.sweep.table import _print_table

    monkeypatch.setenv("COLUMNS", "80")
    overrides = "optim.lr=0.0031622776601683794 trainer.global_batch=4 model.n_embd=32"
    rows = [
        {"job": n, "overrides": overrides, "final_loss": 4.123456, "val_loss": 5.372019,
         "tokens_per_s": 71123.4, "objective_value": 5.372019, "pruned_at": None,
         "run_dir": f"/tmp/multirun/2026-12-07/17-50-00/{n}"}
        for n in range(2)
    ]  # fmt: skip
    _print_table(rows, tmp_path / "sweep_results.csv")
    out = capsys.readouterr().out
    table = out.split("every job's figures", 1)[0]
    assert fits(table), out
    words = set(table.split())
    assert set(overrides.split()) <= words and "4.123456" in words and "5.372019" in words
    assert str(tmp_path / "sweep_results.csv") in out
