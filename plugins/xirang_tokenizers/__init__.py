"""Tokenizers (``tokenizer=bytes|bpe|hf``): UTF-8 bytes, a byte-level BPE trained on the run's
own snapshot, or a local Hugging Face tokenizer. bpe and hf run on the Hugging Face
``tokenizers`` library, imported only when a run selects them."""

from typing import TypedDict

from xirang import conf_folder, hookimpl
from xirang.specs import TokenizerSpec


class _Needs(TypedDict):
    requires: tuple[str, ...]
    install: str


#: bpe and hf run on the Hugging Face tokenizers library
_HF = _Needs(requires=("tokenizers",), install='pip install "tokenizers>=0.19"')


@hookimpl
def xirang_tokenizers() -> list[TokenizerSpec]:
    return [
        TokenizerSpec(
            name="bytes",
            target="xirang_tokenizers.bytes:ByteTokenizer",
            schema="xirang_tokenizers.bytes:ByteSettings",
            description="UTF-8 bytes, vocabulary 256; documents end with a text separator",
        ),
        TokenizerSpec(
            name="bpe",
            target="xirang_tokenizers.bpe:BPETokenizer",
            schema="xirang_tokenizers.bpe:BPESettings",
            description="byte-level BPE trained once on the run's snapshot (cached by snapshot)",
            **_HF,
        ),
        TokenizerSpec(
            name="hf",
            target="xirang_tokenizers.hf:HFTokenizer",
            schema="xirang_tokenizers.hf:HFSettings",
            description="a local tokenizer.json or tokenizer folder (tokenizer.path); no download",
            **_HF,
        ),
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
