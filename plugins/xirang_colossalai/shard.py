"""What ``plugin=hybrid_parallel`` can shard, and the module it shards.

ShardFormer splits a model by a policy written for its architecture, and Colossal-AI 0.5 has
none for xirang's own modules: without one, HybridParallelPlugin either stops or leaves the
model whole. It ships a policy for Hugging Face's Llama (``LlamaForCausalLMPolicy``, keyed by
transformers' Llama classes), so the families it can serve are the Llama-shaped ones: ``hf``
with a Llama config, and ``llama``, trained as its Hugging Face twin (same tensors, renamed by
the family's own :class:`~xirang_core.specs.HFInterop`; xirang's Llama already uses the
rotate-half RoPE that transformers expects). Any other family is refused when the config is
checked, before a worker starts.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, cast

from torch import nn

from xirang import ConfigError
from xirang.model import hf_config_file

SHARDABLE = ("llama", "hf")


def check_shardable(config: dict[str, Any]) -> None:
    """Refuse a model ShardFormer has no policy for (runs when the config is checked)."""
    family = config["model"]["family"]
    if family not in SHARDABLE:
        raise ConfigError(
            f"parallel.plugin=hybrid_parallel shards with Colossal-AI's Llama ShardFormer "
            f"policy, which fits model families {', '.join(SHARDABLE)}; model family "
            f"'{family}' has none. Use model=llama_tiny|llama3_1b|... or model=hf with a Llama "
            f"config, or parallel.plugin=low_level_zero|gemini, or the native parallel=hybrid"
        )
    if family == "hf":
        model_type = _hf_model_type(config["model"])
        if model_type != "llama":
            raise ConfigError(
                f"model.config: parallel.plugin=hybrid_parallel needs a Llama-shaped Hugging "
                f"Face model (model_type llama, for Colossal-AI's LlamaForCausalLMPolicy); "
                f"this config's model_type is '{model_type}'. Use parallel.plugin="
                f"low_level_zero|gemini for it"
            )


def _hf_model_type(model: dict[str, Any]) -> str:
    """The ``model_type`` of the Hugging Face config.json the ``model`` section names (what
    transformers' ``AutoConfig`` picks the architecture by)."""
    path = hf_config_file(model)
    try:
        return str(json.loads(path.read_text()).get("model_type", ""))
    except ValueError as exc:
        raise ConfigError(f"model.config: {path} is not JSON ({exc})") from None


def hf_llama(model: nn.Module, config: dict[str, Any]) -> nn.Module:
    """The ``model=hf`` module whose ``.hf`` is transformers' LlamaForCausalLM: the model itself
    for the hf family, the Llama's Hugging Face twin (its weights copied) for the llama family."""
    if config["model"]["family"] == "hf":
        return model
    from xirang import get_registry

    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    interop = get_registry().spec("model", "llama").load_hf()
    hf_config, tensors = interop.to_hf(settings, model.state_dict())
    with tempfile.TemporaryDirectory(prefix="xirang-llama-hf-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps(hf_config))
        # the hf family's module, as the registry has it: a plugin never imports another
        twin = cast(nn.Module, get_registry().load("model", "hf").from_config({"config": folder}))
    missing, unexpected = twin.get_submodule("hf").load_state_dict(tensors, strict=False)
    tied = ["lm_head.weight"] if hf_config["tie_word_embeddings"] else []
    if unexpected or missing != tied:
        raise ConfigError(
            f"model=llama: its Hugging Face twin for hybrid_parallel does not match "
            f"(missing {missing}, unexpected {unexpected})"
        )
    return twin.to(next(model.parameters()).device)


def llama_policy() -> Any:
    """Colossal-AI's own ShardFormer policy for LlamaForCausalLM."""
    from colossalai.shardformer.policies.llama import LlamaForCausalLMPolicy

    return LlamaForCausalLMPolicy()
