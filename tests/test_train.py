"""The embedded run end to end, as ``python -m xirang`` does it."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import QUICK, run_dirs

pytestmark = pytest.mark.slow


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_default_run_learns_and_leaves_its_artefacts(run_xirang, tmp_path):
    """The headline promise: no arguments, and the loss falls by at least 40%."""
    result = run_xirang()
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    summary = read_summary(run_dir)
    assert summary["steps"] == 300
    assert summary["final_loss"] <= 0.6 * summary["first_loss"]
    # MFU is against the peak calibrated on this machine; load from elsewhere can move either
    assert summary["mfu"] > 0 and summary["tokens_per_s"] > 0 and summary["wall_time_s"] > 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["step"] == 1 and records[-1]["step"] == 300
    assert (run_dir / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["device"]["name"] == "cpu"  # device=auto resolved and recorded
    assert summary["sample"].startswith("def ") and summary["sample"] in result.stdout


def test_two_ddp_workers_share_one_run_directory(run_xirang, tmp_path):
    result = run_xirang("trainer.nproc=2", "parallel=ddp", *QUICK)
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    summary = read_summary(run_dir)
    assert summary["world_size"] == 2 and summary["steps"] == 6
    assert summary["tokens"] == 6 * 16 * 128
    # not a terminal: a line per log step (and the first); the last one with its evaluation
    line = r"^step (\d+) loss [\d.]+ (?:eval_loss [\d.]+ )?tokens/s \d+$"
    steps = re.findall(line, result.stdout, re.MULTILINE)
    assert steps == ["1", "2", "4", "6"]
    assert "starting 2 workers" in result.stderr  # said before the silent start-up


def test_sweep_runs_each_job_and_tabulates_final_losses(lr_sweep):
    result, folder = lr_sweep
    assert len(run_dirs(folder)) == 2
    [table] = list(folder.rglob("sweep_results.csv"))
    rows = list(csv.DictReader(table.open()))
    assert sorted(r["overrides"].split()[0] for r in rows) == ["optim.lr=0.001", "optim.lr=0.003"]
    assert all(float(r["final_loss"]) > 0 for r in rows)
    assert "sweep results" in result.stdout


def test_overrides_reach_the_run(run_xirang, tmp_path):
    result = run_xirang(
        "model=gpt_small",
        "trainer.max_steps=2",
        "optim.lr=1e-3",
        "trainer.sample_tokens=0",
        "trainer.global_batch=4",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["model"]["name"] == "gpt_small" and config["optim"]["lr"] == 1e-3
    assert read_summary(run_dir)["params"] > 5_000_000


def test_the_corpus_is_packed_once_and_a_failed_start_leaves_it_intact(
    run_xirang, tmp_path, xirang_home, prepared_home
):
    before = _fingerprint(xirang_home / "datasets")  # packed as a first run packs it
    failed = run_xirang("trainer.nproc=3", "parallel=ddp")
    assert failed.returncode != 0
    assert run_xirang(*QUICK).returncode == 0
    assert _fingerprint(xirang_home / "datasets") == before


def _fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_run_without_matplotlib_trains_and_only_skips_the_plot(run_xirang, tmp_path):
    """A lean GPU image may lack matplotlib: the run trains and ends well, without the curve."""
    blocker = tmp_path / "no-matplotlib" / "matplotlib"  # hand-written: an import that fails
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is not installed')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(blocker.parent), os.environ.get("PYTHONPATH", "")])}
    result = run_xirang(*QUICK, "model=gpt_tiny", "tokenizer=bytes", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    assert read_summary(run_dir)["steps"] == 6
    assert not (run_dir / "loss_curve.png").exists()
    assert "loss_curve.png not drawn: matplotlib is not installed" in result.stderr
