"""``model.lora_rank`` on the Llama family: LoRA adapters (peft) put into xirang's own Llama over
a pretrained folder, which transformers writes here with random weights (nothing downloaded);
the exports are checked against peft's own merge on transformers' ``LlamaForCausalLM``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import QUICK, run_dirs
from tests.plugins.xirang_llama.test_llama_rope_scaling import save_llama

LORA = ("model.lora_rank=4", "model.lora_alpha=8", "model.lora_targets=[q_proj,v_proj]")
RUN = ("model=llama_tiny", "tokenizer=bytes", "data.seq_len=16", "trainer.global_batch=8")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pretrained-llama")
    save_llama(folder, None)
    return folder


def _export(run: Path, *args: str) -> None:
    command = [sys.executable, "-m", "xirang", "ckpt", "export", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=run.parent)
    assert done.returncode == 0, done.stderr[-3000:]


def test_lora_trains_the_llamas_adapters_only_and_exports_them_merged_or_for_peft(
    run_xirang, tmp_path: Path, pretrained: Path
) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    fast = ("optim.lr=0.01", "optim.warmup_steps=1")  # adapters start at zero: learn quickly
    result = run_xirang(*RUN, f"model.pretrained={pretrained}", *LORA, *QUICK, *fast)
    assert result.returncode == 0, result.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_loss"] < summary["first_loss"]
    weights, merged_dir = tmp_path / "weights.safetensors", tmp_path / "merged"
    _export(run, str(run), "-o", str(weights))
    _export(run, "--format", "hf", str(run), str(merged_dir))
    trained = load_file(weights)
    base = load_file(pretrained / "model.safetensors")
    frozen = {k.replace(".base_layer", ""): t for k, t in trained.items() if ".lora_" not in k}
    for name, tensor in base.items():  # every pretrained weight left exactly as it was
        assert torch.equal(frozen[name.removeprefix("model.")], tensor), name
    adapters = {k: t for k, t in trained.items() if ".lora_" in k}
    assert len(adapters) == 2 * 2 * 2  # A and B, q and v, two layers
    assert any(t.abs().sum() > 0 for k, t in adapters.items() if ".lora_B." in k)  # trained

    reference = get_peft_model(
        AutoModelForCausalLM.from_pretrained(pretrained, local_files_only=True),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    theirs = {f"base_model.model.model.{k}": t for k, t in adapters.items()}
    assert not reference.load_state_dict(theirs, strict=False).unexpected_keys
    merged = reference.merge_and_unload().eval()
    exported = AutoModelForCausalLM.from_pretrained(merged_dir, local_files_only=True).eval()
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(exported(x).logits, merged(x).logits, rtol=0, atol=1e-5)

    adapter = tmp_path / "adapter"
    _export(run, "--format", "peft", str(run), "-o", str(adapter))
    plain = AutoModelForCausalLM.from_pretrained(pretrained, local_files_only=True)
    loaded = PeftModel.from_pretrained(plain, adapter).eval()  # peft's own loader
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).logits, merged(x).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (("model.lora_alpha=0",), "alpha above 0"),
        (("model.lora_rank=4", "model.lora_targets=[qkv]"), "qkv is not a linear layer"),
        (("model.lora_rank=4", "parallel=fsdp"), "LoRA runs under parallel=single or parallel=ddp"),
    ],
)
def test_bad_lora_settings_of_a_llama_are_refused_before_training(
    run_xirang, pretrained: Path, overrides: tuple[str, ...], says: str
) -> None:
    result = run_xirang(*RUN, f"model.pretrained={pretrained}", *overrides, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "xirang error:" in result.stderr and says in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_lora_of_a_llama_without_pretrained_weights_is_refused(run_xirang) -> None:
    result = run_xirang(*RUN, "model.lora_rank=4", timeout=120)
    assert result.returncode == 2
    assert "LoRA trains adapters over pretrained weights" in result.stderr
