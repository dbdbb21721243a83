"""Fine-tuning a pretrained folder reads the data with the folder's own tokenizer: its
weights' embedding rows stand for that tokenizer's ids. A tokenizer whose ids do not fit is
refused naming the fix (the folder's tokenizer), never a vocabulary size that would break
the weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.plugins.xirang_tokenizers.test_tokenizers import local_tokenizer_json
from xirang_core.config import compose
from xirang_core.data.tokenizer import open_tokenizer, prepare_tokenizer, tokenizer_runtime
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry

VOCAB = 288  # the tokenizer below has at most 270 ids


@pytest.fixture(scope="module")
def llama_with_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LlamaForCausalLM saved by transformers, and a tokenizer.json trained here, in
    one folder, as a Hugging Face model repository holds them."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("llama")
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    local_tokenizer_json(folder, eos="</s>")
    return folder


@pytest.fixture(scope="module")
def llama_without_tokenizer(llama_with_tokenizer: Path, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("weights-only")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(llama_with_tokenizer / name, folder / name)
    return folder


@pytest.mark.parametrize("model", ["model=llama_tiny", "model=hf"])
def test_the_folders_tokenizer_is_the_runs(model: str, llama_with_tokenizer: Path) -> None:
    config = compose([model, f"model.pretrained={llama_with_tokenizer}", "data.seq_len=16"])
    assert config["tokenizer"]["name"] == "hf"
    assert config["tokenizer"]["path"] == str(llama_with_tokenizer)
    assert config["model"]["vocab_size"] == VOCAB  # the weights' rows, not the tokenizer's
    tokenizer = prepare_tokenizer(config, get_registry())
    expected = open_tokenizer(
        {
            **config,
            "tokenizer": {"name": "hf", "path": str(llama_with_tokenizer), "eos_token": ""},
            "runtime": {"tokenizer": tokenizer_runtime(tokenizer)},
        }
    )
    assert tokenizer.fingerprint == expected.fingerprint
    [ids] = tokenizer.encode_batch(["def f(x):"])
    assert int(ids[-1]) == tokenizer.backend.token_to_id("</s>")  # the folder's eos ends it


def test_a_tokenizer_on_the_command_line_wins(llama_with_tokenizer: Path) -> None:
    config = compose(
        ["model=llama_tiny", f"model.pretrained={llama_with_tokenizer}", "tokenizer=bytes"]
    )
    assert config["tokenizer"]["name"] == "bytes"


def test_a_folder_without_a_tokenizer_keeps_the_configured_one(
    llama_without_tokenizer: Path,
) -> None:
    config = compose(
        ["model=llama_tiny", f"model.pretrained={llama_without_tokenizer}", "tokenizer=bytes"]
    )
    assert config["tokenizer"]["name"] == "bytes"


def test_too_many_ids_name_the_folders_tokenizer_not_a_vocab_size(
    llama_with_tokenizer: Path, llama_without_tokenizer: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        compose(["model=llama_tiny", f"model.pretrained={llama_with_tokenizer}", "tokenizer=bpe"])
    message = str(caught.value)
    assert f"Use theirs: tokenizer=hf tokenizer.path={llama_with_tokenizer}" in message
    assert "4096 ids, more than the 288 rows" in message and "vocab_size" not in message
    with pytest.raises(ConfigError) as caught:  # the default tokenizer, bpe
        compose(["model=llama_tiny", f"model.pretrained={llama_without_tokenizer}"])
    message = str(caught.value)
    assert "tokenizer=hf tokenizer.path=<the folder of the tokenizer.json" in message
    assert "vocab_size" not in message
