"""What every family's LoRA test checks of a trained run's exports, against peft's own merge of
the same adapters on transformers' model of the pretrained folder: ``--format hf`` gives its
logits, and ``--format peft`` loads with ``PeftModel.from_pretrained`` and gives them too."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tests.conftest import QUICK, run_dirs

#: the adapters the LoRA tests train: rank 4, alpha 8, on the q and v projections
LORA = ("model.lora_rank=4", "model.lora_alpha=8", "model.lora_targets=[q_proj,v_proj]")


#: settings every family refuses when the config is composed, and what its error says
BAD_SETTINGS = [
    (("model.lora_rank=-1",), "the rank is 0 (off) or more"),
    (("model.lora_rank=4", "model.lora_targets=[qkv]"), "qkv is not a linear layer"),
    (("model.lora_rank=4", "parallel=fsdp"), "LoRA runs under parallel=single or parallel=ddp"),
]


def assert_refused(result: subprocess.CompletedProcess[str], says: str) -> None:
    """One ``xirang error:`` line saying ``says``, exit status 2, no traceback."""
    assert result.returncode == 2, result.stderr[-2000:]
    assert "xirang error:" in result.stderr and says in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def export(run: Path, *args: str) -> None:
    """``xirang ckpt export`` of ``run`` as a user types it."""
    command = [sys.executable, "-m", "xirang", "ckpt", "export", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=run.parent)
    assert done.returncode == 0, done.stderr[-3000:]


def trained_adapters(
    run_xirang: Any,
    tmp_path: Path,
    pretrained: Path,
    args: tuple[str, ...],
    plain: Callable[[str], str],
) -> tuple[Path, dict[str, torch.Tensor]]:
    """A LoRA run of ``args`` over ``pretrained`` that learned, its every pretrained weight
    exactly as it was (``plain``: a trained tensor's name as the pretrained folder names it),
    and its adapters (A and B, q and v, two layers, some trained): the run and the adapters."""
    from safetensors.torch import load_file

    fast = ("optim.lr=0.01", "optim.warmup_steps=1")  # adapters start at zero: learn quickly
    result = run_xirang(*args, f"model.pretrained={pretrained}", *LORA, *QUICK, *fast)
    assert result.returncode == 0, result.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_loss"] < summary["first_loss"]
    export(run, str(run), "-o", str(tmp_path / "weights.safetensors"))
    trained = load_file(tmp_path / "weights.safetensors")
    frozen = {plain(k): t for k, t in trained.items() if ".lora_" not in k}
    for name, tensor in load_file(pretrained / "model.safetensors").items():
        assert torch.equal(frozen[name], tensor), name
    adapters = {k: t for k, t in trained.items() if ".lora_" in k}
    assert len(adapters) == 2 * 2 * 2
    # the summary counts what trains: the adapters alone, of every parameter (issue 53)
    assert summary["trainable_params"] == sum(t.numel() for t in adapters.values())
    assert summary["total_params"] > summary["trainable_params"]
    assert any(t.abs().sum() > 0 for k, t in adapters.items() if ".lora_B." in k)
    return run, adapters


def check_exports(
    run: Path, pretrained: Path, adapters: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """``adapters`` (named as peft names them on transformers' model) merged by peft into the
    pretrained model: the run's merged export and its peft folder compute the same logits, the
    folder loaded onto the base by hand and by ``AutoPeftModelForCausalLM`` from the base it
    names (relative to the directory the export ran in)."""
    from peft import AutoPeftModelForCausalLM, LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    reference = get_peft_model(
        AutoModelForCausalLM.from_pretrained(pretrained, local_files_only=True),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    assert not reference.load_state_dict(adapters, strict=False).unexpected_keys
    merged = reference.merge_and_unload().eval()
    export(run, "--format", "hf", str(run), str(tmp_path / "merged"))
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", local_files_only=True)
    export(run, "--format", "peft", str(run), "-o", str(tmp_path / "adapter"))
    plain = AutoModelForCausalLM.from_pretrained(pretrained, local_files_only=True)
    loaded = PeftModel.from_pretrained(plain, tmp_path / "adapter")  # peft's own loader
    with contextlib.chdir(run.parent):
        auto = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter", local_files_only=True)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        expected = merged(x).logits
        torch.testing.assert_close(exported.eval()(x).logits, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(loaded.eval()(x).logits, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(auto.eval()(x).logits, expected, rtol=0, atol=1e-5)
