"""A xirang checkpoint is a DCP checkpoint: torch's own ``FileSystemReader`` and
``dcp_to_torch_save`` read a step folder as-is, and checkpoints of the layout before it still
resume, bitwise."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from xirang_ckpt.cli import main

from tests.checkpoint.helpers import build, manager, saved_run, train_step

OLD_LAYOUT = Path(__file__).parent / "data" / "old-layout"


def saved_step(run: Path, async_save: bool = True) -> tuple[torch.nn.Module, Path]:
    model, _, folder = saved_run(str(run), async_save)
    return model, Path(folder)


def test_torch_reads_a_step_folder_as_is(tmp_path: Path) -> None:
    model, folder = saved_step(tmp_path)
    metadata = FileSystemReader(str(folder)).read_metadata()
    keys = set(metadata.state_dict_metadata)
    assert {f"model.{k}" for k in model.state_dict()} <= keys
    assert "optim.state.lin.weight.exp_avg" in keys

    loaded = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load({"model": loaded}, storage_reader=FileSystemReader(str(folder)), no_dist=True)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded[name], value), name


def test_dcp_to_torch_save_converts_a_step_folder(tmp_path: Path) -> None:
    model, folder = saved_step(tmp_path, async_save=False)
    out = tmp_path / "whole.pt"
    dcp_to_torch_save(str(folder), str(out))
    whole = torch.load(out, weights_only=False)  # torch's own tool writes pickled values too
    for name, value in model.state_dict().items():
        assert torch.equal(whole["model"][name], value), name
    assert whole["optim"]["state"]["lin.weight"]["exp_avg"].shape == model.lin.weight.shape
    assert main(["verify", str(tmp_path / "checkpoints")]) == 0


def test_verify_checks_the_metadata_torch_reads(tmp_path: Path, capsys) -> None:
    _, folder = saved_step(tmp_path, async_save=False)
    (folder / ".metadata").write_bytes(b"not the metadata")
    assert main(["verify", str(tmp_path / "checkpoints")]) == 1
    assert ".metadata in its folder is not the one its manifest lists" in capsys.readouterr().out


def test_a_checkpoint_of_the_older_layout_resumes_bitwise(tmp_path: Path) -> None:
    """Saved by xirang before its step folders were DCP's (files under ``dcp/``, raw)."""
    root = tmp_path / "checkpoints"
    shutil.copytree(OLD_LAYOUT / "checkpoints", root)
    expected = load_file(str(OLD_LAYOUT / "expected.safetensors"))
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert manager(str(tmp_path), model, optim).restore() == 8
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[f"model.{name}"]), name
    names = {id(p): n for n, p in model.named_parameters()}
    for param, state in optim.state.items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[key], expected[f"optim.{names[id(param)]}.{key}"])
    assert main(["verify", str(root)]) == 0


def test_a_save_killed_before_its_manifest_is_torn_and_the_run_resumes_before_it(
    tmp_path: Path,
) -> None:
    """A preemption between the step's ``.metadata`` and its manifest leaves a folder torch's
    tools would half-read: it is a torn save of xirang's own (resume goes back a step), not a
    foreign DCP checkpoint to import (which stopped a preempted pool job)."""
    model, optim, folder = saved_run(str(tmp_path), async_save=False)
    mgr = manager(str(tmp_path), model, optim, async_save=False)
    train_step(model, optim, 3)
    mgr.save(3)
    mgr.wait(raise_errors=True)
    step3 = Path(folder).parent / "step-000000003"
    (step3 / "manifest.json").unlink()
    assert (step3 / ".metadata").is_file()
    fresh, fresh_optim = build(seed=5)
    assert manager(str(tmp_path), fresh, fresh_optim).restore() == 3  # step 2's, next is 3
