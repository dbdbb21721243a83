"""``xirang ckpt ls|verify|export|keep`` on a run's checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from xirang_ckpt.cli import main

from tests.checkpoint.helpers import build, manager, train_step
from xirang_core.checkpoint.chunks import chunk_key
from xirang_core.errors import ConfigError


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    """A run directory with checkpoints at steps 1..3, as a run leaves them."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"checkpoint": {"uri": ""}}))
    model, optim = build()
    mgr = manager(str(tmp_path), model, optim, keep=5)
    for step in (1, 2, 3):
        train_step(model, optim, step)
        mgr.save(step)
        mgr.wait(raise_errors=True)
    return tmp_path, model


def test_ls_lists_newest_first(run: tuple[Path, torch.nn.Module], capsys) -> None:
    assert main(["ls", "--json", str(run[0])]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in rows] == [3, 2, 1]
    assert all(r["state"] == "committed" and r["bytes_total"] > 0 for r in rows)


def test_verify_names_the_corrupt_step(run: tuple[Path, torch.nn.Module], capsys) -> None:
    assert main(["verify", str(run[0])]) == 0
    manifest = json.loads((run[0] / "checkpoints/step-000000002/manifest.json").read_text())
    digest = next(iter(manifest["files"].values()))["chunks"][0]
    (run[0] / "checkpoints" / chunk_key(digest)).write_bytes(b"rot")
    assert main(["verify", str(run[0])]) == 1
    out = capsys.readouterr().out
    assert "step 2: CORRUPT" in out and "step 3: ok" in out


def test_export_writes_the_weights_as_safetensors(run: tuple[Path, torch.nn.Module]) -> None:
    path, model = run
    out = path / "weights.safetensors"
    assert main(["export", str(path), "-o", str(out)]) == 0
    tensors = load_file(str(out))
    for name, value in model.state_dict().items():
        assert torch.equal(tensors[name], value), name


def test_keep_protects_from_retention_and_refuses_unknown(
    run: tuple[Path, torch.nn.Module],
) -> None:
    assert main(["keep", str(run[0]), "1"]) == 0
    assert (run[0] / "checkpoints/step-000000001/KEEP").exists()
    with pytest.raises(ConfigError, match="cannot mark step 9"):
        main(["keep", str(run[0]), "9"])


def test_an_unknown_run_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a run directory"):
        main(["ls", str(tmp_path / "nope")])
