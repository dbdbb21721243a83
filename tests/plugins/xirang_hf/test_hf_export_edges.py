"""What a chat LoRA fine-tune of a Llama 3.1-shaped folder exports, read back by transformers
and peft themselves: every eos id of the source, its own generation config, its chat template,
an adapter folder ``AutoPeftModelForCausalLM`` loads with its base, and no path of this machine.
The pretrained folder (config, weights, tokenizer, chat template) is built here; nothing is
downloaded."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import run_dirs

pytestmark = pytest.mark.slow

#: Llama 3.1's special tokens, and the ids its config stops generation at (end of text, end of
#: message, end of turn)
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|eot_id|>\n"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)
#: the source's own sampling, which fine-tuning leaves as it is
GENERATION = {"do_sample": True, "temperature": 0.6, "top_p": 0.9}
CHAT = [{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant", "content": "4"}]


def llama31_folder(folder: Path) -> Path:
    """A tiny Llama 3.1-shaped pretrained folder: a byte-level BPE tokenizer with Llama 3.1's
    special tokens and a chat template (saved by transformers), random weights, a config that
    lists three eos ids and a generation config of its own."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=280,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator([f"user: What is {i} plus {i}?" for i in range(50)], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=SPECIALS[0], eos_token="<|eot_id|>"
    )
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    ids = [backend.token_to_id(t) for t in SPECIALS]
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=288, max_position_embeddings=64,
        tie_word_embeddings=False, bos_token_id=ids[0], eos_token_id=ids[1:],
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    GenerationConfig(bos_token_id=ids[0], eos_token_id=ids[1:], **GENERATION).save_pretrained(
        folder
    )
    return folder


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A chat LoRA run over the folder from the command line, exported ``--format hf`` and
    ``--format peft`` from the folder the run was started in: (that folder, source, export)."""
    work = tmp_path_factory.mktemp("chat-lora")
    source = llama31_folder(work / "llama-3.1")
    lines = (json.dumps({"messages": CHAT}) + "\n") * 40
    (work / "chat.jsonl").write_text(lines)
    run = [
        "model=hf", "model.pretrained=llama-3.1", "tokenizer=hf", "tokenizer.path=llama-3.1",
        "model.lora_rank=4", "model.lora_targets=[q_proj,v_proj]", "data=chat",
        "data.path=chat.jsonl", "data.seq_len=32", "trainer.global_batch=4",
        "trainer.max_steps=2", "trainer.sample_tokens=0",
    ]  # fmt: skip
    for args in (run, ["ckpt", "export", "--format", "hf", "RUN", "merged"],
                 ["ckpt", "export", "--format", "peft", "RUN", "-o", "adapter"]):  # fmt: skip
        args = [str(run_dirs(work)[0]) if a == "RUN" else a for a in args]
        done = subprocess.run(
            [sys.executable, "-m", "xirang", *args], cwd=work, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
    return work, source, work / "merged"


def test_the_export_keeps_every_eos_id_and_the_source_s_generation_config(exported) -> None:
    from transformers import AutoConfig, GenerationConfig

    _, source, out = exported
    theirs = AutoConfig.from_pretrained(source, local_files_only=True)
    ours = AutoConfig.from_pretrained(out, local_files_only=True)
    assert len(theirs.eos_token_id) == 3 and ours.eos_token_id == theirs.eos_token_id
    generation = GenerationConfig.from_pretrained(out, local_files_only=True)
    own = GenerationConfig.from_pretrained(source, local_files_only=True)
    for key in ("do_sample", "temperature", "top_p", "top_k", "bos_token_id", "eos_token_id"):
        assert getattr(generation, key) == getattr(own, key), key
    assert (generation.temperature, generation.top_p) == (0.6, 0.9)


def test_the_export_keeps_the_chat_template(exported) -> None:
    from transformers import AutoTokenizer

    _, source, out = exported
    theirs = AutoTokenizer.from_pretrained(source, local_files_only=True)
    ours = AutoTokenizer.from_pretrained(out, local_files_only=True)
    prompt = CHAT[:1]
    assert ours.apply_chat_template(prompt, add_generation_prompt=True) == (
        theirs.apply_chat_template(prompt, add_generation_prompt=True)
    )


def test_auto_peft_loads_the_adapter_onto_its_base(exported) -> None:
    """``AutoPeftModelForCausalLM`` finds the base the adapter names (the pretrained folder,
    relative to where the export ran) and computes what the merged export computes."""
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    work, _, out = exported
    with contextlib.chdir(work):
        adapted = AutoPeftModelForCausalLM.from_pretrained("adapter", local_files_only=True)
    merged = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    x = torch.randint(0, 280, (2, 16))
    with torch.no_grad():
        expected = merged.eval()(x).logits
        torch.testing.assert_close(adapted.eval()(x).logits, expected, rtol=0, atol=1e-5)


def test_no_export_carries_a_path_of_this_machine(exported) -> None:
    work, _, out = exported
    machine = str(work.parents[1])  # every test folder of this session is under it
    for folder in (out, work / "adapter"):
        for file in folder.iterdir():
            if file.suffix in (".json", ".jinja", ".md", ".txt"):
                assert machine not in file.read_text(), file
