"""torchtitan 0.3.0's own Llama 3 checkpoints in and out, with the real package
(tests/checkpoint/titan.py installs it from PyPI once): its ``CheckpointManager``'s step folder
imports with its names mapped and resumes in xirang's Llama with the same logits, and
``xirang ckpt export --format torchtitan`` writes a folder its ``CheckpointManager`` loads
(``initial_load_path``) into its model with the same logits. An import that does not fit the
model is refused naming the keys; ``--model-only`` brings the weights alone; a resume that
cannot load is one error naming both layouts."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from xirang_ckpt.cli import main
from xirang_llama.config import LlamaConfig
from xirang_llama.model import Llama

from tests.checkpoint import titan_driver as titan
from tests.checkpoint.helpers import manager
from tests.checkpoint.titan import run_driver
from xirang.parallel import build_optimizer
from xirang_core.errors import ConfigError, XirangError

D = titan.DIMS
SHAPE = {
    "dim": D["dim"],
    "n_layers": D["n_layers"],
    "n_heads": D["n_heads"],
    "n_kv_heads": D["n_kv_heads"],
    "ffn_dim": D["ffn_dim"],
    "vocab_size": D["vocab"],
    "rope_theta": titan.THETA,
    "max_seq_len": 64,
}
MODEL = ["--model", "family=llama", *(f"{k}={v}" for k, v in SHAPE.items())]
ADAMW = {"name": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1}


def xirang_llama(seed: int = 5) -> tuple[Llama, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = Llama(LlamaConfig(**SHAPE))
    return model, build_optimizer(model, ADAMW)


#: installs torchtitan (once) and runs it in subprocesses
titan_run = pytest.mark.slow


@pytest.fixture(scope="module")
def titan_step(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torchtitan trained its Llama 3 two steps and saved: ``root/step-2``, ``logits.pt``."""
    root = tmp_path_factory.mktemp("titan") / "checkpoint"
    run_driver("save", str(root), "2")
    return root / "step-2"


@titan_run
def test_torchtitans_checkpoint_resumes_in_xirangs_llama_with_its_logits(
    tmp_path: Path, titan_step: Path, capsys
) -> None:
    run = tmp_path / "run"
    assert main(["import", str(titan_step), str(run / "checkpoints"), *MODEL]) == 0
    assert "as step 2" in capsys.readouterr().out
    model, optim = xirang_llama()
    assert manager(str(run), model, optim).restore() == 3
    with torch.no_grad():
        logits = model(titan.TOKENS)
    torch.testing.assert_close(logits, torch.load(titan_step.parent / "logits.pt"))
    # Adam's state came with it, brought to xirang's two groups (matrices, vectors)
    assert [len(g["params"]) for g in optim.param_groups] == [16, 5]
    assert all(int(s["step"]) == 2 and s["exp_avg"].abs().sum() > 0 for s in optim.state.values())
    assert len(optim.state) == 21
    loss = model(titan.TOKENS[:, :-1], targets=titan.TOKENS[:, 1:])
    loss.backward()
    optim.step()  # and training continues
    assert all(int(s["step"]) == 3 for s in optim.state.values())


@titan_run
def test_an_export_loads_in_torchtitans_checkpoint_manager_with_the_same_logits(
    tmp_path: Path, titan_step: Path
) -> None:
    """torchtitan -> xirang -> torchtitan: the weights come back into its fused ``wqkv``
    exactly, so its model computes its own logits bitwise; loaded with its optimizer
    (``initial_load_model_only`` off), Adam's state and settings are what it saved."""
    ckpts = tmp_path / "run" / "checkpoints"
    assert main(["import", str(titan_step), str(ckpts), *MODEL]) == 0
    out = tmp_path / "back" / "step-2"
    assert main(["export", str(ckpts), "--format", "torchtitan", "-o", str(out), *MODEL]) == 0
    run_driver("full", str(out), str(tmp_path / "logits.pt"))
    back = torch.load(tmp_path / "logits.pt")
    assert torch.equal(back, torch.load(titan_step.parent / "logits.pt"))
    loaded = torch.load(tmp_path / "logits.optim", weights_only=False)
    saved = torch.load(titan_step.parent / "optim.pt", weights_only=False)
    assert loaded.keys() == saved.keys()
    moments = [k for k in saved if k.startswith("state.layers.0.attention.qkv_linear.wqkv")]
    assert len(moments) == 3  # step, exp_avg, exp_avg_sq of the fused parameter
    for key, value in saved.items():
        same = torch.equal(loaded[key], value) if torch.is_tensor(value) else loaded[key] == value
        assert same, key


@titan_run
def test_torchtitans_names_without_the_model_are_refused(tmp_path: Path, titan_step) -> None:
    with pytest.raises(ConfigError, match=r"torchtitan's names \(tok_embeddings.weight\).*--model"):
        main(["import", str(titan_step), str(tmp_path / "run")])


@titan_run
def test_an_import_that_does_not_fit_the_model_is_refused_naming_keys(
    tmp_path: Path, titan_step: Path
) -> None:
    run = tmp_path / "run"
    deeper = [*MODEL, "n_layers=3"]
    with pytest.raises(ConfigError, match=r"needs layers\.2\.input_layernorm\.weight.*lacks"):
        main(["import", str(titan_step), str(run), *deeper])
    wider = [*MODEL, "ffn_dim=128"]
    with pytest.raises(ConfigError, match=r"shapes differ: layers\.0\.mlp\.down_proj\.weight"):
        main(["import", str(titan_step), str(run), *wider])
    assert not (run / "step-000000002").exists()


@titan_run
def test_model_only_brings_the_weights_and_a_fresh_optimizer(
    tmp_path: Path, titan_step: Path
) -> None:
    run = tmp_path / "run"
    assert main(["import", str(titan_step), str(run / "checkpoints"), *MODEL, "--model-only"]) == 0
    model, optim = xirang_llama()
    assert manager(str(run), model, optim).restore() == 3
    with torch.no_grad():
        torch.testing.assert_close(model(titan.TOKENS), torch.load(titan_step.parent / "logits.pt"))
    moments = [s["exp_avg"] for s in optim.state.values() if "exp_avg" in s]
    assert all(not m.any() for m in moments)  # nothing of torchtitan's Adam came in
    assert [g["weight_decay"] for g in optim.param_groups] == [0.1, 0.0]  # this run's own


def one_group_save(folder: Path) -> tuple[Llama, torch.optim.Optimizer]:
    """xirang's Llama saved by plain DCP with one AdamW group over every parameter (as a
    script of one's own writes it), one step trained."""
    torch.manual_seed(0)
    model = Llama(LlamaConfig(**SHAPE))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    model(titan.TOKENS[:, :-1], targets=titan.TOKENS[:, 1:]).backward()
    optim.step()
    model_sd, optim_sd = get_state_dict(model, optim)
    state = {"model": model_sd, "optim": optim_sd, "train_state": {"step": torch.tensor(1)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    return model, optim


def test_a_one_group_save_resumes_once_brought_to_the_models_groups(tmp_path: Path) -> None:
    """Imported as it is, its one param group cannot load into xirang's two: the resume
    stops on one error naming both layouts, not DCP's traceback. Imported for the model, its
    groups are xirang's and the run resumes with its weights and Adam's moments."""
    saved, saved_optim = one_group_save(tmp_path / "one-group")
    as_is = tmp_path / "as-is"
    assert main(["import", str(tmp_path / "one-group"), str(as_is / "checkpoints")]) == 0
    model, optim = xirang_llama()
    with pytest.raises(XirangError) as refused:
        manager(str(as_is), model, optim).restore()
    message = str(refused.value)
    assert "\n" not in message and "need optim.param_groups.1.amsgrad" in message
    assert "(the checkpoint: 21 model tensors, 1 optimizer param groups; this run: 21 " in message
    assert "2 optimizer param groups)" in message and "--model-only" in message

    fitted = tmp_path / "fitted"
    assert main(["import", str(tmp_path / "one-group"), str(fitted / "checkpoints"), *MODEL]) == 0
    model, optim = xirang_llama()
    assert manager(str(fitted), model, optim).restore() == 2
    for name, value in saved.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    theirs = {n: saved_optim.state[p] for n, p in saved.named_parameters()}
    for name, param in model.named_parameters():
        assert torch.equal(optim.state[param]["exp_avg"], theirs[name]["exp_avg"]), name
