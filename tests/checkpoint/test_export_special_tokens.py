"""An export transformers can generate from: the tokenizer's end-of-document token is the eos,
bos and pad id of ``config.json``, ``generation_config.json`` and the tokenizer config, so
``generate`` stops at end-of-text and a batch of prompts pads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Prepared, run_dirs
from tests.conftest import xirang_cli as xirang

pytestmark = pytest.mark.slow

#: the default BPE tokenizer (its <|endoftext|> token is what the test checks), which
#: ``prepared_home`` has learnt, rather than a vocabulary of its own to learn and tokenize with
RUN = (
    "model=gpt_tiny",
    "tokenizer=bpe",
    "model.vocab_size=0",
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=32",
    "data.seq_len=32",
    "trainer.global_batch=4",
    "trainer.max_steps=2",
    "trainer.sample_tokens=0",
)
KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def test_bpe_export_names_its_end_of_text_token(
    run_xirang, tmp_path: Path, prepared_home: Prepared
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    done = run_xirang(*RUN)
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    out = tmp_path / "hf-out"
    exported = xirang("ckpt", "export", "--format", "hf", str(run), str(out), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (eos,) * 3
    config = json.loads((out / "config.json").read_text())
    assert {k: config[k] for k in KEYS} == dict.fromkeys(KEYS, eos)
    generation = GenerationConfig.from_pretrained(out, local_files_only=True)
    assert (generation.eos_token_id, generation.pad_token_id) == (eos, eos)

    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    tokenizer.padding_side = "left"
    batch = tokenizer(["def", "import os and"], padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert generated.shape[0] == 2
    # forced to end a sequence at once, generation stops there and pads the rest
    with torch.no_grad():
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(config["vocab_size"]))
        model.lm_head.bias[eos] = 1e4
        stopped = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert stopped.shape[1] == batch["input_ids"].shape[1] + 1
    assert stopped[:, -1].tolist() == [eos, eos]
