"""``model.lora_rank``: LoRA fine-tuning of a pretrained ``model=hf`` folder through peft. The
folder is a tiny Llama written here with random weights (nothing downloaded); the export is
checked against peft's own merge of the trained adapters, loaded by transformers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.lora_exports import BAD_SETTINGS, assert_refused, check_exports, trained_adapters

RUN = ("model=hf", "tokenizer=bytes", "data.seq_len=16", "trainer.global_batch=8")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory, llama_dir: Path) -> Path:
    """The conftest's tiny Llama config with random weights, saved as a pretrained folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("pretrained-llama")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig.from_pretrained(llama_dir)).save_pretrained(folder)
    return folder


def pretrained_name(name: str) -> str:
    """A trained tensor's name in the pretrained folder: without peft's wrapping."""
    return name.removeprefix("hf.base_model.model.").replace(".base_layer", "")


def test_lora_trains_the_adapters_only_and_exports_them_merged_or_as_peft_s_folder(
    run_xirang, tmp_path: Path, pretrained: Path
) -> None:
    run, adapters = trained_adapters(run_xirang, tmp_path, pretrained, RUN, pretrained_name)
    check_exports(
        run, pretrained, {k.removeprefix("hf."): t for k, t in adapters.items()}, tmp_path
    )


@pytest.mark.parametrize(("overrides", "says"), BAD_SETTINGS)
def test_bad_lora_settings_are_refused_before_training(
    run_xirang, pretrained: Path, overrides: tuple[str, ...], says: str
) -> None:
    result = run_xirang(*RUN, f"model.pretrained={pretrained}", *overrides, timeout=120)
    assert_refused(result, says)


def test_lora_without_pretrained_weights_is_refused(run_xirang, llama_dir: Path) -> None:
    result = run_xirang(*RUN, f"model.config={llama_dir}", "model.lora_rank=4", timeout=120)
    assert result.returncode == 2
    assert "LoRA trains adapters over pretrained weights" in result.stderr


def test_merging_a_tied_models_adapters_warns_of_untied_embeddings_only_when_they_are(
    tmp_path: Path,
) -> None:
    """Issue 53: ``--format hf`` of a LoRA run over a model with tied embeddings printed
    peft's "no longer tied after merging", false there: the checkpoint holds the embedding
    and the head as two equal copies, which peft takes for untied. Where they differ it says
    so still."""
    import warnings

    from transformers import AutoModelForCausalLM, LlamaConfig
    from xirang_hf.lora import attach, merged

    LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        tie_word_embeddings=True,
    ).save_pretrained(tmp_path)
    settings = {"pretrained": str(tmp_path), "lora_rank": 4, "lora_alpha": 8.0}
    settings |= {"lora_dropout": 0.0, "lora_targets": ["q_proj", "v_proj"]}
    base = AutoModelForCausalLM.from_config(LlamaConfig.from_pretrained(tmp_path))
    state = {f"hf.{k}": v.clone() for k, v in attach(base, settings).state_dict().items()}
    head = "hf.base_model.model.lm_head.weight"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        merged(settings, state)
    assert not [w for w in said if "no longer tied" in str(w.message)]
    state[head] = state[head] + 1.0  # a head that really differs from the embedding
    with pytest.warns(UserWarning, match="no longer tied"):
        merged(settings, state)
