"""The GPT model family (``model=gpt_tiny|gpt_small|gpt_125m``): a decoder-only transformer."""

from xirang import conf_folder, hookimpl
from xirang.specs import ModelSpec


@hookimpl
def xirang_models() -> list[ModelSpec]:
    return [
        ModelSpec(
            name="gpt",
            target="xirang_gpt.model:GPT",
            schema="xirang_gpt.config:GPTConfig",
            parallelize="xirang_gpt.parallelize:GPTParallelize",
            hf="xirang_gpt.hf:GPTHF",
            description="decoder-only transformer (pre-norm, tied embeddings, causal SDPA)",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
