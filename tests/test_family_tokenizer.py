"""A model family written for one tokenizer says so (``ModelSpec.tokenizer``): a run that
names no tokenizer takes it, a run that names one keeps it, and a byte-sized vocabulary that
meets a larger tokenizer is told about ``tokenizer=bytes`` (#33)."""

from __future__ import annotations

import sys
import types
from importlib import metadata
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from xirang import hookimpl
from xirang.specs import ModelSpec
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import build_registry

#: the GPT family, published again by a third party as written for bytes
BYTE_GPT = ["model=gpt_tiny", "model.family=bytegpt"]


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The installed plugins plus one more distribution's model family."""
    module = types.ModuleType("xirang_bytegpt")

    @hookimpl
    def xirang_models() -> list[ModelSpec]:
        return [
            ModelSpec(
                name="bytegpt",
                target="xirang_gpt.model:GPT",
                schema="xirang_gpt.config:GPTConfig",
                tokenizer="bytes",
            )
        ]

    module.xirang_models = xirang_models  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    point = EntryPoint("bytegpt", module.__name__, "xirang")
    return build_registry([*metadata.entry_points(group="xirang"), point])


def test_a_family_written_for_bytes_reads_bytes_unless_told_otherwise(registry) -> None:
    assert compose(BYTE_GPT, registry)["tokenizer"]["name"] == "bytes"
    assert compose(BYTE_GPT, registry)["model"]["vocab_size"] == 256
    assert compose([*BYTE_GPT, "tokenizer=bpe"], registry)["tokenizer"]["name"] == "bpe"


def test_a_byte_sized_model_meeting_bpe_is_told_about_tokenizer_bytes(registry) -> None:
    with pytest.raises(ConfigError, match="a model written for bytes takes tokenizer=bytes"):
        compose(["model=gpt_tiny", "model.vocab_size=256", "tokenizer=bpe"], registry)
