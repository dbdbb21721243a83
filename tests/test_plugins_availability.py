"""``xirang plugins`` and ``xirang devices`` agree on what is usable here, and the listing stays
faster than ``import torch`` (it never imports it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys


def xirang_json(*args: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "xirang", *args, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def registered(kind: str) -> dict[str, dict]:
    return {
        r["name"]: r for p in xirang_json("plugins") for r in p["registers"] if r["kind"] == kind
    }


def test_a_device_backend_is_available_only_where_xirang_devices_finds_it() -> None:
    listed = registered("device")
    for entry in xirang_json("devices"):
        row = listed[entry["backend"]]
        assert row["installed"]
        if entry["present"]:
            assert row["available"], row
        if not row["available"]:  # absent hardware: the very reason `xirang devices` gives
            assert not entry["present"]
            assert row["reason"] == f"installed, no device: {entry['reason']}"


def test_a_scheduler_whose_program_is_missing_is_not_available() -> None:
    slurm = registered("scheduler")["slurm"]
    assert slurm["installed"]
    assert slurm["available"] == (shutil.which("sbatch") is not None)
    if not slurm["available"]:
        assert slurm["reason"] == "installed, not usable here: sbatch not on PATH"


def test_the_listing_never_imports_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "xirang", "plugins", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "torch" not in imported and json.loads(done.stdout)
