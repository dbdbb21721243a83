"""Hugging Face causal language models (``model=hf``): any architecture ``transformers`` builds
from a local ``config.json``, optionally starting from local safetensors weights.

Nothing is ever downloaded: configs and weights are read from local paths only."""

from xirang import conf_folder, hookimpl
from xirang.specs import ModelSpec


@hookimpl
def xirang_models() -> list[ModelSpec]:
    return [
        ModelSpec(
            name="hf",
            target="xirang_hf.model:HFCausalLM",
            schema="xirang_hf.settings:HFSettings",
            parallelize="xirang_hf.parallelize:HFParallelize",
            hf="xirang_hf.interop:HFLayout",
            requires=("transformers",),
            install="pip install 'xirang[hf]'",
            description="a transformers causal LM built from a local config.json (sdpa attention)",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
