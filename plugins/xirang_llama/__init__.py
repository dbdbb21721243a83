"""The Llama model family (``model=llama_tiny|llama_small|llama3_1b|llama3_8b|llama3_70b``)."""

from xirang import conf_folder, hookimpl
from xirang.specs import ModelSpec


@hookimpl
def xirang_models() -> list[ModelSpec]:
    return [
        ModelSpec(
            name="llama",
            target="xirang_llama.model:Llama",
            schema="xirang_llama.config:LlamaConfig",
            parallelize="xirang_llama.parallelize:LlamaParallelize",
            hf="xirang_llama.hf:LlamaHF",
            description="Llama 3 (RoPE, RMSNorm, SwiGLU, grouped-query attention)",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
