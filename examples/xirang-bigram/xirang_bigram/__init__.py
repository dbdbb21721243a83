"""A bigram language model family (``model=bigram_tiny``): the smallest model xirang trains."""

from xirang import conf_folder, hookimpl
from xirang.specs import ModelSpec


@hookimpl
def xirang_models() -> list[ModelSpec]:
    return [
        ModelSpec(
            name="bigram",
            target="xirang_bigram.model:Bigram",
            schema="xirang_bigram.model:BigramConfig",
            description="next token from the current one: embedding, one hidden layer, head",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
