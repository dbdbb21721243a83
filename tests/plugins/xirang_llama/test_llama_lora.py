"""``model.lora_rank`` on the Llama family: LoRA adapters (peft) put into xirang's own Llama over
a pretrained folder, which transformers writes here with random weights (nothing downloaded);
the exports are checked against peft's own merge on transformers' ``LlamaForCausalLM``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lora_exports import BAD_SETTINGS, assert_refused, check_exports, trained_adapters
from tests.plugins.xirang_llama.test_llama_rope_scaling import save_llama

RUN = ("model=llama_tiny", "tokenizer=bytes", "data.seq_len=16", "trainer.global_batch=8")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pretrained-llama")
    save_llama(folder, None)
    return folder


def pretrained_name(name: str) -> str:
    """A trained tensor's name in the transformers folder: its ``model.`` level, no peft level."""
    return name if name == "lm_head.weight" else "model." + name.replace(".base_layer", "")


def test_lora_trains_the_llamas_adapters_only_and_exports_them_merged_or_for_peft(
    run_xirang, tmp_path: Path, pretrained: Path
) -> None:
    run, adapters = trained_adapters(run_xirang, tmp_path, pretrained, RUN, pretrained_name)
    check_exports(
        run, pretrained, {f"base_model.model.model.{k}": t for k, t in adapters.items()}, tmp_path
    )


@pytest.mark.parametrize(("overrides", "says"), BAD_SETTINGS)
def test_bad_lora_settings_of_a_llama_are_refused_before_training(
    run_xirang, pretrained: Path, overrides: tuple[str, ...], says: str
) -> None:
    result = run_xirang(*RUN, f"model.pretrained={pretrained}", *overrides, timeout=120)
    assert_refused(result, says)


def test_lora_of_a_llama_without_pretrained_weights_is_refused(run_xirang) -> None:
    result = run_xirang(*RUN, "model.lora_rank=4", timeout=120)
    assert result.returncode == 2
    assert "LoRA trains adapters over pretrained weights" in result.stderr


def test_a_head_tied_to_the_embedding_is_no_lora_target() -> None:
    """Merging an adapter into a tied head would change the token embedding as well."""
    from dataclasses import asdict

    from xirang_llama.config import LlamaConfig

    from xirang import ConfigError

    tied = {**asdict(LlamaConfig(tie_embeddings=True)), "pretrained": "llama", "lora_rank": 4}
    untied = {**tied, "tie_embeddings": False, "lora_targets": ["lm_head"]}
    assert LlamaConfig.resolve(untied) == untied
    with pytest.raises(ConfigError, match="lm_head is not a linear layer of the Llama"):
        LlamaConfig.resolve({**tied, "lora_targets": ["lm_head"]})
