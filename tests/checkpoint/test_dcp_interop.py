"""``xirang ckpt import`` of a DCP folder in torchtitan's key layout (a toy model's names, saved
by torch's own DCP; torchtitan's real model and ``CheckpointManager``: test_torchtitan.py) and
``xirang ckpt export --format dcp``: model and optimizer state and the step leave and enter, and
training continues as it would."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
from xirang_ckpt.cli import main

from tests.checkpoint.helpers import build, manager, saved_run, train_step
from xirang_core.checkpoint.chunks import RefusedCheckpoint
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.errors import ConfigError


def torchtitan_folder(folder: Path, step: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A checkpoint as torchtitan saves one at world size 1: the model's tensors at the top
    level, the optimizer flattened under ``optimizer``, the step in ``train_state``."""
    model, optim = build()
    for n in range(1, step + 1):
        train_step(model, optim, n)
    flat = StateDictOptions(flatten_optimizer_state_dict=True)
    state = {
        **model.state_dict(),
        "optimizer": get_optimizer_state_dict(model, optim, options=flat),
        "train_state": {"step": torch.tensor(step)},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    return model, optim


def same_state(model, optim, other, other_optim) -> None:
    for name, value in model.state_dict().items():
        assert torch.equal(other.state_dict()[name], value), name
    mine, theirs = optim.state_dict()["state"], other_optim.state_dict()["state"]
    assert mine.keys() == theirs.keys()
    for index, state in mine.items():
        for key, value in state.items():
            assert torch.equal(theirs[index][key], value), (index, key)


def test_a_torchtitan_checkpoint_comes_in_and_training_continues(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "titan" / "step-3"
    model, optim = torchtitan_folder(folder, step=3)
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp"]
    run = tmp_path / "run"

    assert main(["import", str(folder), str(run / "checkpoints")]) == 0
    assert "as step 3" in capsys.readouterr().out
    fresh, fresh_optim = build(seed=7)
    assert manager(str(run), fresh, fresh_optim).restore() == 4
    same_state(model, optim, fresh, fresh_optim)
    torch.manual_seed(4)  # dropout: the same draws on both sides
    expected = train_step(model, optim, 4)
    torch.manual_seed(4)
    assert train_step(fresh, fresh_optim, 4) == expected  # its loss curve, continued


def test_a_dcp_folder_among_step_folders_is_not_called_torn(tmp_path: Path, capsys) -> None:
    root = tmp_path / "titan"
    torchtitan_folder(root / "step-2", step=2)
    assert main(["ls", "--json", str(root)]) == 0
    out = capsys.readouterr().out
    assert "torn" not in out and "xirang ckpt import" in out
    model, optim = build()
    with pytest.raises(RefusedCheckpoint, match="xirang ckpt import"):
        manager(str(tmp_path), model, optim, uri=str(root)).restore()
    CheckpointStore.at(str(root)).retain(keep_last=1)
    assert (root / "step-2" / ".metadata").is_file()  # retention leaves it alone


def test_export_dcp_round_trips_model_optimizer_and_step(tmp_path: Path) -> None:
    model, optim, _ = saved_run(str(tmp_path), async_save=False)
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "checkpoints"), "--format", "dcp", "-o", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {".metadata", "__0_0.distcp"}
    dcp_to_torch_save(str(out), str(tmp_path / "whole.pt"))
    whole = torch.load(tmp_path / "whole.pt", weights_only=False)
    assert torch.equal(whole["model"]["lin.weight"], model.lin.weight)
    assert int(whole["train_state"]["step"]) == 2

    other = tmp_path / "other"
    assert main(["import", str(out), str(other)]) == 0
    fresh, fresh_optim = build(seed=5)
    assert manager(str(tmp_path), fresh, fresh_optim, uri=str(other)).restore() == 3
    same_state(model, optim, fresh, fresh_optim)


def test_a_metadata_pickle_naming_other_code_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "hostile"
    folder.mkdir()
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Payload(marker))
    (folder / ".metadata").write_bytes(payload)
    with pytest.raises(RefusedCheckpoint, match="not DCP's metadata"):
        main(["import", str(folder), str(tmp_path / "run")])
    assert not marker.exists()


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def test_a_folder_without_its_step_needs_step(tmp_path: Path) -> None:
    model, _ = build()
    folder = tmp_path / "weights-only"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(folder), no_dist=True)
    with pytest.raises(ConfigError, match="give --step N"):
        main(["import", str(folder), str(tmp_path / "run")])
    assert main(["import", str(folder), str(tmp_path / "run"), "--step", "10"]) == 0
    assert CheckpointStore.at(str(tmp_path / "run")).steps() == [10]


@pytest.fixture(scope="module")
def two_rank_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torchtitan checkpoint (step 3) that two FSDP2 ranks wrote, each its own shard file."""
    import torch.multiprocessing as mp

    from tests.checkpoint.dist_worker import torchtitan_save

    root = tmp_path_factory.mktemp("titan")
    folder = root / "step-3"
    args = (2, str(folder), 3, str(root / "init"))
    mp.spawn(torchtitan_save, args=args, nprocs=2, join=True)
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    return folder


def test_a_torchtitan_checkpoint_of_two_fsdp_ranks_comes_in_whole(
    tmp_path: Path, capsys, two_rank_folder: Path
) -> None:
    """torchtitan at scale: two ranks under FSDP2 each write their shards (``__0_0.distcp``,
    ``__1_0.distcp``) of the model and the flattened optimizer state, written here by torch's
    own DCP in torchtitan's layout. The import joins the shards: the weights and Adam's moments
    restored equal the full tensors the ranks gathered, bitwise."""
    folder = two_rank_folder
    run = tmp_path / "run"
    assert main(["import", str(folder), str(run / "checkpoints")]) == 0
    assert "as step 3" in capsys.readouterr().out
    fresh, fresh_optim = build(seed=7, dropout=0.0)
    assert manager(str(run), fresh, fresh_optim).restore() == 4
    full = torch.load(folder.parent / "full.pt", weights_only=True)
    for name, value in full["model"].items():
        assert torch.equal(fresh.state_dict()[name], value), name
    flat = StateDictOptions(flatten_optimizer_state_dict=True)
    mine = get_optimizer_state_dict(fresh, fresh_optim, options=flat)
    moments = {k: v for k, v in full["optimizer"].items() if k.startswith("state.")}
    assert moments and all(torch.equal(mine[k], v) for k, v in moments.items())


def test_a_checkpoint_missing_one_ranks_shard_file_is_refused_whole(
    tmp_path: Path, two_rank_folder: Path
) -> None:
    """A copy that lost rank 1's file: one error naming it, and no step written to the run."""
    import shutil

    folder = tmp_path / "step-3"
    shutil.copytree(two_rank_folder, folder)
    (folder / "__1_0.distcp").unlink()
    run = tmp_path / "run" / "checkpoints"
    with pytest.raises(ConfigError, match=r"names '__1_0\.distcp', which it does not hold"):
        main(["import", str(folder), str(run)])
    assert not run.exists() or CheckpointStore.at(str(run)).steps() == []
