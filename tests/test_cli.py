"""The command line as a user meets it: listings, help, and clear errors for bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import run_dirs


def xirang(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "xirang", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **env},
        timeout=120,
    )


def test_plugins_json_lists_every_builtin_with_availability():
    result = xirang("plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["plugin"]: row for row in json.loads(result.stdout)}
    cpu = rows["cpu"]
    assert cpu["status"] == "loaded" and cpu["version"]
    assert cpu["registers"] == [
        {
            "kind": "device",
            "name": "cpu",
            "description": cpu["registers"][0]["description"],
            "installed": True,
            "available": True,
            "reason": "",
        }
    ]


def test_plugins_lists_a_blocked_plugin_as_disabled():
    result = xirang("plugins", "--json", XIRANG_DISABLE_PLUGINS="flatprice")
    rows = {row["plugin"]: row for row in json.loads(result.stdout)}
    assert rows["flatprice"]["status"] == "disabled"


def test_devices_reports_cpu_inventory_and_calibration():
    result = xirang("devices", "--json")
    assert result.returncode == 0, result.stderr
    cpu = next(e for e in json.loads(result.stdout) if e["backend"] == "cpu")
    assert cpu["present"] and cpu["devices"][0]["memory_bytes"] > 0
    assert cpu["calibration"]["matmul_tflops"]["float32"] > 0
    assert cpu["calibration"]["memory_bandwidth_gbps"] > 0


def test_help_lists_groups_and_their_options():
    result = xirang("--help")
    assert result.returncode == 0
    section = result.stdout.split("== Config groups")[1].split("== Config ==")[0]
    section = re.sub(r",\n +", ", ", section)  # a long group wraps onto indented lines
    groups = dict(re.findall(r"^(\w+): (.+)$", section, flags=re.M))
    for group, option in [
        ("parallel", "ddp"),
        ("device", "auto"),
        ("device", "cpu"),
        ("cost", "flat"),
        ("model", "gpt_tiny"),
    ]:
        assert option in groups[group].split(", ")


def test_cfg_job_prints_the_composed_config():
    result = xirang("--cfg", "job", "optim.lr=0.01")
    assert result.returncode == 0
    assert "lr: 0.01" in result.stdout and "family: llama" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=gpt_huge"], "model=gpt_huge: no such option. Valid model options: gpt_125m"),
        (["trainer.max_steps=abc"], "trainer.max_steps: Value 'abc'"),
        (["+trainer.speed=9"], "trainer.speed: no such setting. Valid keys of trainer:"),
        (["trainer.nproc=3", "parallel=ddp"], "does not divide over trainer.nproc=3"),
        (["trainer.nproc=2"], "parallel=single runs a single process"),
        (["trainer.micro_batch=5"], "trainer.micro_batch=5 does not divide"),
        (["cost.prices.cpu=-1"], "cost.prices: prices must be >= 0"),
        (["+parallel.bucket_mb=1", "parallel=ddp"], "parallel.bucket_mb: no such setting"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["optim.lr=-1"], "optim.lr=-1.0: must be >= 0"),
        (["optim.beta2=1.5"], "optim.beta2=1.5: must be in [0, 1)"),
        (["optim.warmup_steps=-5"], "optim.warmup_steps=-5: must be >= 0"),
    ],
)
def test_bad_input_gets_one_clear_message_and_a_nonzero_exit(args, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "xirang", *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode != 0
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert not any(p.name == "metrics.jsonl" for p in tmp_path.rglob("*"))
    assert run_dirs(tmp_path) == []


def test_a_closed_pipe_ends_the_listing_quietly():
    """``xirang | head``: the reader goes away first, and no traceback follows it."""
    listing = subprocess.Popen(
        [sys.executable, "-c", "from xirang_core.cli import main; raise SystemExit(main([]))"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    listing.stdout.close()  # closed before the listing is written
    assert listing.stderr.read() == b"" and listing.wait() == 141
