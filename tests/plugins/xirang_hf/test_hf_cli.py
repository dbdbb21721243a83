"""Bad model=hf input stops the command line with one ``xirang error:`` line, before any
worker starts; a good one trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import QUICK, run_dirs

pytestmark = pytest.mark.slow


def test_config_transformers_cannot_build_stops_before_workers(run_xirang, tmp_path: Path) -> None:
    from transformers import ViTConfig

    folder = tmp_path / "vit"
    ViTConfig().save_pretrained(folder)
    result = run_xirang("model=hf", f"model.config={folder}")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("xirang error: model.config="), errors
    assert "cannot build a causal LM" in errors[0]
    assert "Traceback" not in result.stderr and not run_dirs(tmp_path)


def test_tensor_parallel_on_gpt2_is_refused_naming_what_splits(
    run_xirang, tmp_path: Path, gpt2_dir: Path
) -> None:
    result = run_xirang(
        "model=hf",
        f"model.config={gpt2_dir}",
        "tokenizer=bytes",
        "parallel=tp",
        "trainer.nproc=2",
        "data.seq_len=16",
    )
    assert result.returncode == 2
    assert "xirang error:" in result.stderr and "no tensor-parallel layout" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_trained_llama_exports_to_what_transformers_loads(
    run_xirang, tmp_path: Path, llama_dir: Path
) -> None:
    """Train from the command line, export --format hf: transformers' logits equal those of
    the checkpoint's weights in xirang's model (the run's vocab_size override included)."""
    import subprocess
    import sys

    import torch
    import yaml
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from xirang_hf.model import HFCausalLM

    bytes_ = ("tokenizer=bytes", "model.vocab_size=256")
    result = run_xirang("model=hf", f"model.config={llama_dir}", *bytes_, "data.seq_len=32", *QUICK)
    assert result.returncode == 0, result.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["model"] == "hf" and summary["final_loss"] < summary["first_loss"]
    out, weights = tmp_path / "hf-out", tmp_path / "weights.safetensors"
    for args in (["--format", "hf", str(run), str(out)], [str(run), "-o", str(weights)]):
        command = [sys.executable, "-m", "xirang", "ckpt", "export", *args]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    settings = yaml.safe_load((run / "config.yaml").read_text())["model"]
    ours = HFCausalLM({k: v for k, v in settings.items() if k not in ("family", "name")})
    ours.load_state_dict(load_file(weights))
    theirs = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    x = torch.randint(0, 256, (2, 32))
    with torch.no_grad():
        assert torch.allclose(theirs.eval()(x).logits, ours.eval()(x), atol=1e-4)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 256
    command = [sys.executable, "-m", "xirang", "ckpt", "export", "--format", "peft", str(run)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and "trained no adapters (model.lora_rank=0)" in done.stderr


def test_a_folder_whose_config_names_its_own_code_runs_none_of_it(
    run_xirang, tmp_path: Path
) -> None:
    """``auto_map`` in config.json makes transformers offer to run the folder's Python (and
    ask on the terminal); xirang never runs code from a model folder: one error, no prompt."""
    folder = tmp_path / "remote"
    folder.mkdir()
    marker = tmp_path / "code-ran"
    (folder / "configuration_mystery.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import PretrainedConfig\n"
        "class MysteryConfig(PretrainedConfig):\n    model_type = 'mystery'\n"
    )
    config = {
        "model_type": "mystery",
        "auto_map": {"AutoConfig": "configuration_mystery.MysteryConfig"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    result = run_xirang("model=hf", f"model.config={folder}", timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("xirang error: model.config="), errors
    assert "its own code" in errors[0] and not marker.exists()
