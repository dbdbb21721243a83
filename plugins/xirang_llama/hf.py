"""The Llama family in Hugging Face's layout: ``LlamaForCausalLM``'s config and tensor names.

xirang's Llama already uses Hugging Face's parameter names (without the ``model.`` prefix) and
its rotate-half RoPE, so the mapping renames and never permutes rows.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import torch

from xirang import ConfigError
from xirang.lora import merge_injected, save_injected
from xirang.specs import HFInteropBase
from xirang_llama import titan
from xirang_llama.config import LLAMA3_SCALING, LORA_TARGETS, LlamaConfig

#: (xirang setting, Hugging Face key) pairs that carry the same value
_SAME = (
    ("dim", "hidden_size"),
    ("ffn_dim", "intermediate_size"),
    ("n_heads", "num_attention_heads"),
    ("n_kv_heads", "num_key_value_heads"),
    ("n_layers", "num_hidden_layers"),
    ("norm_eps", "rms_norm_eps"),
    ("vocab_size", "vocab_size"),
    ("max_seq_len", "max_position_embeddings"),
    ("tie_embeddings", "tie_word_embeddings"),
)
#: Hugging Face settings this model cannot honour unless they have these values
_FIXED = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
_PREFIX = "model."
_HEAD = "lm_head.weight"


class LlamaHF(HFInteropBase):
    """The :class:`xirang_core.specs.HFInterop` mapping of the Llama family."""

    def to_hf(
        self, settings: dict[str, Any], state: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """``config.json`` contents and tensors by Hugging Face name; a tied head is left out
        (``transformers`` ties it to the embedding on load)."""
        cfg = _config(settings)
        if cfg.lora_rank:  # the adapters merged into the weights they adapt
            state = merge_injected(lambda: _model(cfg), asdict(cfg), LORA_TARGETS, state)
        dtype = next(iter(state.values())).dtype if state else torch.float32
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            **{hf: getattr(cfg, ours) for ours, hf in _SAME},
            **_FIXED,
            "head_dim": cfg.head_dim,
            "rope_theta": cfg.rope_theta,
            **({"rope_scaling": dict(cfg.rope_scaling)} if cfg.rope_scaling else {}),
            "torch_dtype": str(dtype).removeprefix("torch."),
        }
        tensors = {
            (name if name == _HEAD else _PREFIX + name): tensor
            for name, tensor in state.items()
            if not (name == _HEAD and cfg.tie_embeddings)
        }
        return config, tensors

    def save_adapter(self, settings: dict[str, Any], state: dict[str, Any], out: Any) -> int:
        """A LoRA run's adapters as peft's folder for ``LlamaForCausalLM`` (the names gain its
        ``model.`` level), which ``PeftModel.from_pretrained`` loads onto the pretrained model."""
        cfg = _config(settings)
        if not cfg.lora_rank:
            raise ConfigError(
                "--format peft: this run trained no adapters (model.lora_rank=0); use --format hf"
            )
        return save_injected(asdict(cfg), state, out, LORA_TARGETS, _hf_name)

    def from_torchtitan(
        self, settings: dict[str, Any], tensors: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], list[str]]:
        """xirang's tensors from torchtitan's Llama 3 names (:mod:`xirang_llama.titan`)."""
        return titan.from_torchtitan(_config(settings), tensors)

    def to_torchtitan(
        self, settings: dict[str, Any], tensors: dict[str, torch.Tensor], fused: bool
    ) -> dict[str, torch.Tensor]:
        """torchtitan's Llama 3 names from xirang's (:mod:`xirang_llama.titan`)."""
        return titan.to_torchtitan(_config(settings), tensors, fused)

    def from_hf(
        self, hf_config: dict[str, Any], tensors: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Model settings and a state dict that loads strictly into ``Llama``; refuses a
        config whose architecture this implementation does not compute."""
        _check_compatible(hf_config)
        settings = {ours: hf_config[hf] for ours, hf in _SAME if hf in hf_config}
        missing = [hf for ours, hf in _SAME[:-1] if ours not in settings]
        if missing:
            raise ConfigError(f"config.json: missing {', '.join(missing)} (a Llama needs them)")
        settings.setdefault("tie_embeddings", False)
        settings["rope_theta"] = float(_rope_theta(hf_config))
        settings["rope_scaling"] = _rope_scaling(hf_config)
        state = {name.removeprefix(_PREFIX): tensor for name, tensor in tensors.items()}
        if settings["tie_embeddings"]:
            state[_HEAD] = state["embed_tokens.weight"]
        return settings, state


def _config(settings: dict[str, Any]) -> LlamaConfig:
    known = {f.name for f in fields(LlamaConfig)}
    return LlamaConfig(**{k: v for k, v in settings.items() if k in known})


def _model(cfg: LlamaConfig) -> torch.nn.Module:
    from xirang_llama.model import Llama  # the model's module, only for a LoRA export

    return Llama(cfg)


def _hf_name(name: str) -> str:
    return name if name.startswith("lm_head") else _PREFIX + name


def _check_compatible(hf_config: dict[str, Any]) -> None:
    if hf_config.get("model_type") != "llama":
        raise ConfigError(
            f"config.json: model_type={hf_config.get('model_type')!r}; the llama family reads "
            "only 'llama' (use model=hf for other architectures)"
        )
    for key, value in _FIXED.items():
        if hf_config.get(key, value) != value:
            raise ConfigError(
                f"config.json: {key}={hf_config[key]!r}; xirang's Llama has {value!r}"
            )
    hidden, heads = hf_config.get("hidden_size", 0), hf_config.get("num_attention_heads", 1)
    head_dim = hf_config.get("head_dim") or hidden // heads
    if head_dim * heads != hidden:
        raise ConfigError(
            f"config.json: head_dim={head_dim} x num_attention_heads={heads} != hidden_size="
            f"{hidden}; xirang's Llama has head_dim = hidden_size / num_attention_heads"
        )


def _rope(hf_config: dict[str, Any]) -> dict[str, Any]:
    """RoPE's settings from a transformers 4 (``rope_theta``, ``rope_scaling``) or 5
    (``rope_parameters``) config."""
    return dict(hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {})


def _rope_theta(hf_config: dict[str, Any]) -> float:
    """RoPE's base; plain RoPE and Llama 3.1's scaling (``rope_type: llama3``) are computed
    here, anything else is refused."""
    rope = _rope(hf_config)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "llama3"):
        raise ConfigError(
            f"config.json: rope_type={kind!r}; xirang's Llama computes 'default' and 'llama3' RoPE"
        )
    return rope.get("rope_theta", hf_config.get("rope_theta", 10000.0))


def _rope_scaling(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The model's ``rope_scaling`` setting: {} for plain RoPE, else Llama 3.1's factors."""
    rope = _rope(hf_config)
    if rope.get("rope_type", rope.get("type", "default")) == "default":
        return {}
    try:
        return {"rope_type": "llama3", **{k: rope[k] for k in LLAMA3_SCALING}}
    except KeyError as exc:
        raise ConfigError(f"config.json: rope_type 'llama3' needs {exc.args[0]}") from None
