"""The local scheduler evicts a device its health probe drains and restarts the run from the
latest checkpoint on the devices left. Real command line, real plugin (a test double device
plugin registered through an entry point), real elastic workers over gloo."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from xirang_core.checkpoint.events import read_events

pytestmark = pytest.mark.slow

DOUBLES = Path(__file__).parent / "doubles"
REPO = Path(__file__).resolve().parents[3]
SMALL = (
    "model=gpt_tiny",
    "tokenizer=bytes",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "data.seq_len=32",
    "trainer.global_batch=4",
    "trainer.log_every=4",
    "trainer.sample_tokens=0",
)


def plugin_path(site: Path) -> str:
    """A PYTHONPATH on which the flaky device plugin is installed like any plugin: a
    ``.dist-info`` naming its module in the ``xirang`` entry-point group."""
    info = site / "xirang_flaky_device-0.1.dist-info"
    info.mkdir(parents=True)
    metadata = "Metadata-Version: 2.1\nName: xirang-flaky-device\nVersion: 0.1\n"
    (info / "METADATA").write_text(metadata)
    (info / "entry_points.txt").write_text("[xirang]\nflaky = xirang_flaky_device\n")
    parts = [str(site), str(DOUBLES), str(REPO), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def test_a_drained_device_is_evicted_and_the_run_resumes_on_the_rest(
    run_xirang: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    result = run_xirang(
        *SMALL,
        "device=flaky",
        f"device.run_dir={run}",
        "device.drain_after_step=6",  # device 1 fails once the step-8 checkpoint is committed
        "trainer.nproc=2",
        "parallel=ddp",
        "trainer.max_restarts=2",
        "trainer.max_steps=16",
        "checkpoint.interval=4",
        "checkpoint.async_save=false",
        f"hydra.run.dir={run}",
        env={"PYTHONPATH": plugin_path(tmp_path / "site"), "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    events = read_events(run)
    unhealthy = [e for e in events if e["event"] == "unhealthy"]
    assert [(e["rank"], e["device"], e["step"]) for e in unhealthy] == [(1, 1, 8)]
    evicted = [e for e in events if e["event"] == "evict"]
    assert [e["device"] for e in evicted] == [1]
    assert "uncorrectable ECC errors" in evicted[0]["reason"]
    restores = [e for e in events if e["event"] == "restore"]
    assert [(e["step"], e["world_size"], e["restart"]) for e in restores] == [(8, 1, 1)]
    report = " ".join((result.stdout + result.stderr).split())
    assert "restart 1 of 2: evicted device 1 (ecc: uncorrectable ECC errors" in report
    assert "continuing on 1 worker(s) (was 2), from checkpoint step 8" in report
    assert (run / "summary.json").exists()
